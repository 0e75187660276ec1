"""What counting someone else's shards costs, per shard and for 10^6 shards (``scale_bench.py``).

Shards in img2dataset's layout at full size, behind a loopback S3 server (moto's, on 127.0.0.1):
1,000 samples that downloaded in a tar (``KEY.jpg`` ~40 KB of random bytes -- the count never
decodes them -- ``KEY.txt``, ``KEY.json`` as img2dataset writes them: ~42 MB a tar), and a
Parquet of the 1,100 it tried (img2dataset's columns: url, caption, key, status, error_message,
sizes, exif, sha256; a row group every 100 rows) and a ``_stats.json`` beside it. ``wdstool
index --out`` counts ``SIDE`` of them from their side files and ``SCAN`` by their tars' headers
(``count_by="scan"``); requests and bytes are the command's own count (tests/s3 checks it against
a counting proxy); seconds are wall time on this machine with the command's default
parallelism (4 batches at once, 16 shards each). Per shard, requests and bytes do not depend on
the number of shards; 10^6 shards is that times 10^6 (time: this machine's rate, a cluster's
nodes divide it).
"""

from __future__ import annotations

import io
import json
import random
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

SIDE, SCAN, SAMPLES, TRIED = 64, 4, 1000, 1100
SHARDS = 10**6


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def _shard(folder: Path, s: int, full: bool, rng: random.Random) -> None:
    """``NNNNN.tar`` (members at full size where ``full``, else one small member: a tar the
    side-file count never opens), ``NNNNN.parquet``, ``NNNNN_stats.json``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    failed = set(rng.sample(range(TRIED), TRIED - SAMPLES))
    rows, buf = [], io.BytesIO()
    words = ["a", "photo", "of", "the", "dog", "red", "car", "on", "street", "view", "old"]
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(TRIED):
            key, ok = f"{s:05d}{i:04d}", i not in failed
            row = {
                "url": f"https://images.example.com/photos/{rng.getrandbits(64):016x}/{key}.jpg",
                "caption": " ".join(rng.choice(words) for _ in range(12)),
                "key": key,
                "status": "success" if ok else "failed_to_download",
                "error_message": None if ok else "<urlopen error [Errno -2] Name not known>",
                "width": 512 if ok else None,
                "height": 384 if ok else None,
                "original_width": 1024 if ok else None,
                "original_height": 768 if ok else None,
                "exif": json.dumps({"Image Make": "Camera", "Image Model": f"M{i}"})
                if ok
                else None,
                "sha256": f"{rng.getrandbits(256):064x}" if ok else None,
            }
            rows.append(row)
            if ok and full:
                _member(tar, f"{key}.jpg", rng.randbytes(int(rng.uniform(20_000, 60_000))))
                _member(tar, f"{key}.txt", row["caption"].encode())
                _member(tar, f"{key}.json", json.dumps(row, indent=4).encode())
        if not full:
            _member(tar, "placeholder.txt", b"never read")
    (folder / f"{s:05d}.tar").write_bytes(buf.getvalue())
    table = pa.Table.from_pylist(rows)
    with pq.ParquetWriter(folder / f"{s:05d}.parquet", table.schema) as writer:
        for a in range(0, TRIED, 100):
            writer.write_table(table.slice(a, 100))
    stats = {"count": TRIED, "successes": SAMPLES, "failed_to_download": TRIED - SAMPLES}
    (folder / f"{s:05d}_stats.json").write_text(json.dumps(stats, indent=4))


def count_cost(s3: Any) -> dict[str, Any]:
    """Per shard and for 10^6 shards: requests, bytes and seconds of counting by side files
    and by a header scan, on ``s3`` (a running ``LocalS3``)."""
    from shard_writer import IndexOptions, write_index_folder

    rng = random.Random(0)
    client = s3.client()
    s3.make_bucket("pool")
    sizes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, n, full in (("side", SIDE, False), ("scan", SCAN, True)):
            folder = Path(tmp) / name
            folder.mkdir()
            for s in range(n):
                _shard(folder, s, full, rng)
            for p in sorted(folder.iterdir()):
                client.put_object(Bucket="pool", Key=f"{name}/{p.name}", Body=p.read_bytes())
            sizes[name] = {
                "tar": (folder / "00000.tar").stat().st_size,
                "parquet": (folder / "00000.parquet").stat().st_size,
            }
        out: dict[str, Any] = {"sizes": sizes["scan"]}
        for how, name, n in (("side-files", "side", SIDE), ("scan", "scan", SCAN)):
            options = IndexOptions(count_by=how, check=0, batch=16)  # type: ignore[arg-type]
            t0 = time.perf_counter()
            got = write_index_folder(
                [f"s3://pool/{name}"],
                str(Path(tmp) / f"index-{name}"),
                options,
                storage_options=s3.storage_options,
            )
            seconds = time.perf_counter() - t0
            assert got["num_samples"] == n * SAMPLES, got
            out[how] = {
                "shards": n,
                "requests_per_shard": got["requests"] / n,
                "bytes_per_shard": got["bytes_read"] / n,
                "seconds_per_shard": seconds / n,
                "at_scale": {
                    "requests": got["requests"] / n * SHARDS,
                    "bytes": got["bytes_read"] / n * SHARDS,
                    "hours_here": seconds / n * SHARDS / 3600,
                },
            }
    return out


def render(cost: dict[str, Any]) -> list[str]:
    """The counting table of ``bench/results/scale.md``."""
    sizes = cost["sizes"]
    lines = [
        "## Counting someone else's shards: side files against a header scan",
        "",
        f"Shards in img2dataset's layout behind loopback S3: {SAMPLES:,} samples in a tar of "
        f"{sizes['tar'] / 1e6:.1f} MB, a Parquet of the {TRIED:,} tried ({sizes['parquet'] / 1e3:.0f} "
        "KB, a row group every 100 rows) and `_stats.json` (the method: `bench/scale_count.py`). "
        "Requests and bytes per shard are measured (side files: the Parquet's footer, then its "
        "key and status chunks with what lies between them, one request where they are under "
        "1 MB apart, and the stats file); 10^6 shards is that times 10^6; hours: this machine's "
        "rate against moto with `wdstool index`'s default parallelism (a cluster's nodes, and a "
        "real store, divide it).",
        "",
        "| counted by | shards measured | requests / shard | bytes / shard | s / shard here "
        "| 10^6 shards: requests | bytes | hours here |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for how, what in (
        ("side-files", "side files (footer, key/status chunks, stats)"),
        ("scan", "header scan (pieces of 4 MB)"),
    ):
        c = cost[how]
        s = c["at_scale"]
        lines.append(
            f"| {what} | {c['shards']} | {c['requests_per_shard']:.1f} | "
            f"{c['bytes_per_shard'] / 1e3:,.1f} KB | {c['seconds_per_shard']:.3f} | "
            f"{s['requests'] / 1e6:,.1f} M | {s['bytes'] / 1e12:,.3f} TB | {s['hours_here']:,.1f} |"
        )
    return lines
