"""Shards in img2dataset's output layout, written as its writer writes them (tests only).

Per shard ``NNNNN``: ``NNNNN.tar`` (webdataset's ``TarWriter`` is Python's ``tarfile``:
``KEY.jpg``, ``KEY.txt``, ``KEY.json`` per sample that downloaded), ``NNNNN.parquet`` (one row
per sample it tried: ``url``, ``caption``, ``key``, ``status``, ``error_message``, sizes, ``exif``,
``sha256``, written 100 rows at a time as its ``BufferedParquetWriter`` does, so a row group every
100 rows) and ``NNNNN_stats.json`` (``count``, ``successes``, ``failed_to_download``,
``failed_to_resize``, ``duration``, ``status_dict``). Keys are the shard's number and the
sample's, ``f"{shard:05d}{i:04d}"``. Samples whose download "failed" are in the Parquet and the
stats, not in the tar.
"""

from __future__ import annotations

import io
import json
import random
import tarfile
from pathlib import Path

from tests.conftest import jpeg_bytes

ROW_GROUP = 100  # img2dataset's BufferedParquetWriter(buffer_size=100)


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o444
    tar.addfile(info, io.BytesIO(data))


def write_shards(
    folder: Path,
    shards: int = 3,
    per_shard: int = 30,
    *,
    failed: float = 0.2,
    seed: int = 0,
    stats: bool = True,
) -> dict[str, list[str]]:
    """Write ``shards`` shards of ``per_shard`` attempted samples each (a ``failed`` share of
    them not downloaded); returns each tar's name -> the keys in it, in its order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    out: dict[str, list[str]] = {}
    for s in range(shards):
        rows, kept = [], []
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for i in range(per_shard):
                key = f"{s:05d}{i:04d}"
                ok = rng.random() >= failed
                row = {
                    "url": f"https://img.example/{key}.jpg",
                    "caption": f"a photo number {i} of shard {s}",
                    "key": key,
                    "status": "success" if ok else "failed_to_download",
                    "error_message": None if ok else "HTTP Error 404: Not Found",
                    "width": 64 if ok else None,
                    "height": 48 if ok else None,
                    "original_width": 640 if ok else None,
                    "original_height": 480 if ok else None,
                    "exif": None,
                    "sha256": None,
                }
                rows.append(row)
                if ok:
                    kept.append(key)
                    _member(tar, f"{key}.jpg", jpeg_bytes(seed * 100_003 + s * 1000 + i))
                    _member(tar, f"{key}.txt", row["caption"].encode())
                    _member(tar, f"{key}.json", json.dumps(row, indent=4).encode())
        (folder / f"{s:05d}.tar").write_bytes(buf.getvalue())
        table = pa.Table.from_pylist(rows)
        with pq.ParquetWriter(folder / f"{s:05d}.parquet", table.schema) as writer:
            for a in range(0, len(rows), ROW_GROUP):
                writer.write_table(table.slice(a, ROW_GROUP))
        if stats:
            failures = per_shard - len(kept)
            (folder / f"{s:05d}_stats.json").write_text(
                json.dumps(
                    {
                        "count": per_shard,
                        "successes": len(kept),
                        "failed_to_download": failures,
                        "failed_to_resize": 0,
                        "duration": 1.5,
                        "status_dict": {"success": len(kept), "HTTP Error 404": failures},
                    },
                    indent=4,
                )
            )
        out[f"{s:05d}.tar"] = kept
    return out
