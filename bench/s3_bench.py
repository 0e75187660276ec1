"""S3 (moto on loopback) against local shards, in the same run: raw reads and the full pipeline.

    python bench/s3_bench.py SHARDS [--workers 1,2] [--repeats 3] [--json FILE]

SHARDS is a packed dataset folder (index.json + shards). The script starts a local S3 server
(moto, its own process, 127.0.0.1), uploads the shards, then interleaves, ``--repeats`` times:

- ``single GET``: one streaming GetObject of the first shard, read in 1 MB pieces (botocore);
- ``raw local`` / ``raw s3``: every shard read whole through ``ShardAccess.open`` (the loader's
  reader: one GET per shard behind a 1 MB buffer, no decode) in ``--workers`` processes;
- ``loader local`` / ``loader s3``: one full epoch of ``make_loader`` (decode + RandomResizedCrop
  + flip, batch 64, 224 px, uint8), images/s after the first batch, for each worker count
  (the order of the two alternates between repeats).

Ratios are taken pair by pair within a repeat; medians are printed. The server shares the
machine's cores with the readers: with as many workers as cores, the CPU the server spends
serving is taken from decoding, which a remote store would not do; ``server_cpu_ms_per_mb``
and ``client_cpu_ms_per_mb`` (one process reading one shard) say how much that is, and an
extra pair per repeat pins the server alone to the last core and the loader (cores - 1
workers) to the others, so what remains of the gap is the client's own cost.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path


def _read_urls(args: tuple[list[str], dict | None]) -> int:
    from loaders.source import ShardAccess

    urls, options = args
    access = ShardAccess(storage_options=options)
    total = 0
    for url in urls:
        with access.open(url) as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total


def raw_read(urls: list[str], options: dict | None, workers: int, pool) -> float:
    """MB/s reading every shard whole in ``workers`` processes (shards dealt round robin)."""
    jobs = [(urls[i::workers], options) for i in range(workers)]
    started = time.perf_counter()
    total = sum(pool.map(_read_urls, jobs))
    return total / (time.perf_counter() - started) / 1e6


def single_get(client, bucket: str, key: str) -> float:
    started = time.perf_counter()
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    n = 0
    while chunk := body.read(1 << 20):
        n += len(chunk)
    return n / (time.perf_counter() - started) / 1e6


def loader_epoch(source: str, options: dict | None, workers: int, batch: int, size: int):
    from loaders import make_loader

    loader = make_loader(
        source, batch, image_size=size, num_workers=workers, seed=0, storage_options=options
    )
    t0 = time.perf_counter()
    it = iter(loader)
    first = next(it)
    t1 = time.perf_counter()
    n = 0
    for b in it:
        n += len(b["labels"])
    dt = time.perf_counter() - t1
    del first
    avg = loader.bytes_read / max(1, n + batch)
    return {"images_per_s": n / dt, "mb_per_s": n * avg / dt / 1e6, "first_batch_s": t1 - t0}


def _cpu_seconds(pid: int) -> float:
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_costs(s3, s3_url: str, local_path: str, options: dict) -> dict[str, float]:
    """CPU per MB of one process streaming one shard through the loader's reader, of the server
    serving it, and of reading the same shard from a local file (best of 3, after a warm-up)."""
    _read_urls(([s3_url], options))  # warm-up: imports, client, connection
    client_ms, server_ms, local_ms = [], [], []
    for _ in range(3):
        c0, s0 = time.process_time(), _cpu_seconds(s3.pid)
        n = _read_urls(([s3_url], options))
        client_ms.append((time.process_time() - c0) * 1000 / (n / 1e6))
        server_ms.append((_cpu_seconds(s3.pid) - s0) * 1000 / (n / 1e6))
        c0 = time.process_time()
        n = _read_urls(([local_path], None))
        local_ms.append((time.process_time() - c0) * 1000 / (n / 1e6))
    return {
        "client_cpu_ms_per_mb": min(client_ms),
        "server_cpu_ms_per_mb": min(server_ms),
        "local_cpu_ms_per_mb": min(local_ms),
    }


def main() -> None:
    import fsspec

    from wdstool.base.locals3 import LocalS3

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shards")
    ap.add_argument("--workers", default="1,2", help="worker counts for the loader runs")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--json", dest="json_path")
    ap.add_argument(
        "--no-isolate",
        dest="isolate",
        action="store_false",
        help="skip the extra pair with the server pinned alone to the last core",
    )
    args = ap.parse_args()
    worker_counts = [int(w) for w in str(args.workers).split(",")]
    cores = sorted(os.sched_getaffinity(0))
    iso_core = cores[-1]
    iso_workers = len(cores) - 1 if args.isolate and len(cores) > 1 else 0
    raw_workers = max(worker_counts)
    local = Path(args.shards)
    manifest = json.loads((local / "index.json").read_text())
    names = [e["url"] for e in manifest["shardlist"]]
    results: dict[str, list[float]] = {}
    loader_runs: dict[str, list[dict]] = {}

    def note(name: str, value: float, unit: str) -> None:
        results.setdefault(name, []).append(value)
        print(f"  {name:<14} {value:8.1f} {unit}", flush=True)

    with LocalS3() as s3:
        s3.make_bucket("bench")
        options = s3.storage_options
        fs = fsspec.filesystem("s3", **options)
        t = time.perf_counter()
        fs.put(str(local) + "/", "bench/ds/", recursive=True)
        print(
            f"uploaded {len(names)} shards to {s3.endpoint_url} in {time.perf_counter() - t:.1f} s"
        )
        client = s3.client()
        local_urls = [str(local / n) for n in names]
        s3_urls = [f"s3://bench/ds/{n}" for n in names]
        cpu = cpu_costs(s3, s3_urls[0], local_urls[0], options)
        print(
            f"CPU per MB streamed: client {cpu['client_cpu_ms_per_mb']:.2f} ms, "
            f"server {cpu['server_cpu_ms_per_mb']:.2f} ms (local file read: "
            f"{cpu['local_cpu_ms_per_mb']:.2f} ms)"
        )
        with mp.get_context("spawn").Pool(raw_workers) as pool:
            for rep in range(args.repeats):
                print(f"repeat {rep + 1}/{args.repeats}")
                note("single GET", single_get(client, "bench", f"ds/{names[0]}"), "MB/s")
                note("raw local", raw_read(local_urls, None, raw_workers, pool), "MB/s")
                note("raw s3", raw_read(s3_urls, options, raw_workers, pool), "MB/s")
                pair = [("local", str(local), None), ("s3", "s3://bench/ds", options)]
                for w in worker_counts:
                    for name, source, opts in pair if rep % 2 == 0 else pair[::-1]:
                        r = loader_epoch(source, opts, w, args.batch_size, args.image_size)
                        loader_runs.setdefault(f"{name} w{w}", []).append(r)
                        note(f"loader {name} w{w}", r["images_per_s"], "images/s")
                if iso_workers:
                    # the server alone on the last core, loader and workers on the others: what
                    # is left of the gap is the client's own cost
                    everything = os.sched_getaffinity(0)
                    os.sched_setaffinity(s3.pid, {iso_core})
                    os.sched_setaffinity(0, everything - {iso_core})
                    try:
                        for name, source, opts in pair if rep % 2 == 0 else pair[::-1]:
                            r = loader_epoch(
                                source, opts, iso_workers, args.batch_size, args.image_size
                            )
                            key = f"{name} w{iso_workers} isolated"
                            loader_runs.setdefault(key, []).append(r)
                            note(f"loader {key}", r["images_per_s"], "images/s")
                    finally:
                        os.sched_setaffinity(0, everything)
                        os.sched_setaffinity(s3.pid, everything)

    def ratio(a: list[float], b: list[float]) -> dict:
        pairs = [x / y for x, y in zip(a, b, strict=True)]
        return {"median": statistics.median(pairs), "min": min(pairs), "max": max(pairs)}

    ratios = {
        f"raw s3 ({raw_workers} procs) / single GET": ratio(
            results["raw s3"], results["single GET"]
        ),
    }
    for w in worker_counts:
        ratios[f"loader s3 / local, {w} workers"] = ratio(
            results[f"loader s3 w{w}"], results[f"loader local w{w}"]
        )
    if iso_workers:
        ratios[f"loader s3 / local, {iso_workers} workers, server isolated"] = ratio(
            results[f"loader s3 w{iso_workers} isolated"],
            results[f"loader local w{iso_workers} isolated"],
        )
    print(f"\nmedians of {args.repeats}:")
    for name, values in results.items():
        unit = "images/s" if name.startswith("loader") else "MB/s"
        print(f"  {name:<17} {statistics.median(values):8.1f} {unit}")
    for name, rs in loader_runs.items():
        print(
            f"  loader {name:<10} {statistics.median(r['mb_per_s'] for r in rs):8.1f} MB/s, "
            f"first batch {statistics.median(r['first_batch_s'] for r in rs):.2f} s"
        )
    for name, r in ratios.items():
        print(f"  {name:<32} {r['median']:.2f}  (range {r['min']:.2f}-{r['max']:.2f})")
    if args.json_path:
        Path(args.json_path).write_text(
            json.dumps(
                {
                    "config": vars(args),
                    "cpu": cpu,
                    "results": results,
                    "loader": loader_runs,
                    "ratios": ratios,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
