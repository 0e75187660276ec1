"""`pack --engine ray` against `--engine local` on this machine, both with 2 CPUs.

    python bench/ray_bench.py bench/data/images [--repeats 3] [--max-count 1000] [--s3]
        [--json bench/results/ray-bench.json]

Per repeat (interleaved): local engine (process pool, 2 workers) and Ray engine (a local Ray
instance with 2 CPUs), both --no-sync into a fresh temporary folder. Reports images/s over the
pack itself (Ray's start-up reported apart: a cluster is started once, not per pack), the Ray
start-up, the cost of an empty Ray task, and the extra time per shard task of the Ray engine.
With --s3, once more from S3 to S3 on a local moto server behind a counting proxy: the list
requests the scan made and both engines' images/s (the server's CPU shares the 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only

from shard_writer.pack import PackOptions, pack


def one_pack(
    src: str, dest: str, engine: str, max_count: int, storage_options=None, quality=None
) -> dict:
    t = time.perf_counter()
    options = PackOptions(
        max_count=max_count, workers=2, engine=engine, sync=False, overwrite=True, quality=quality
    )
    summary = pack(src, dest, options, storage_options=storage_options)
    wall = time.perf_counter() - t
    return {
        "images": summary.samples,
        "shards": summary.shards,
        "pack_s": summary.seconds,
        "wall_s": wall,
        "ray_start_s": summary.extra.get("ray_start_s", 0.0),
        "images_per_s": summary.samples / summary.seconds,
    }


def empty_task_cost(n: int = 2000) -> float:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:

        @ray.remote(num_cpus=1)
        def noop() -> None:
            return None

        ray.get([noop.remote() for _ in range(100)])  # workers started
        t = time.perf_counter()
        ray.get([noop.remote() for _ in range(n)])
        return (time.perf_counter() - t) / n
    finally:
        ray.shutdown()


def s3_leg(src: str, max_count: int) -> dict:
    from tests.support.countproxy import CountingProxy
    from wdstool.base.locals3 import LocalS3

    with LocalS3() as s3:
        s3.make_bucket("bench")
        client = s3.client()
        t = time.perf_counter()
        n = 0
        for p in sorted(Path(src).rglob("*")):
            if p.is_file():
                client.put_object(
                    Bucket="bench",
                    Key=f"images/{p.relative_to(src).as_posix()}",
                    Body=p.read_bytes(),
                )
                n += 1
        upload = time.perf_counter() - t
        out: dict = {"objects": n, "upload_s": upload}
        with CountingProxy(s3.endpoint_url) as proxy:
            options = {**s3.storage_options, "endpoint_url": proxy.endpoint_url}
            from shard_writer.scan import scan_imagefolder

            t = time.perf_counter()
            scan_imagefolder("s3://bench/images", options)
            out["scan_s"] = time.perf_counter() - t
            out["list_requests"] = sum(
                1 for m, p in proxy.requests if m == "GET" and "list-type=2" in p
            )
        for engine in ("local", "ray"):
            r = one_pack(
                "s3://bench/images",
                f"s3://bench/shards-{engine}",
                engine,
                max_count,
                s3.storage_options,
            )
            out[engine] = r
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-count", type=int, default=1000)
    ap.add_argument("--s3", action="store_true")
    ap.add_argument("--quality", type=int, default=None, help="re-encode (CPU-bound pack)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    for p in Path(args.src).rglob("*"):  # warm the page cache
        if p.is_file():
            p.read_bytes()
    runs: dict[str, list[dict]] = {"local": [], "ray": []}
    for _ in range(args.repeats):
        for engine in ("local", "ray"):
            out = tempfile.mkdtemp(prefix=f"raybench-{engine}-")
            try:
                runs[engine].append(
                    one_pack(args.src, out, engine, args.max_count, quality=args.quality)
                )
            finally:
                shutil.rmtree(out, ignore_errors=True)
            r = runs[engine][-1]
            print(
                f"{engine:5s} {r['images_per_s']:7.0f} img/s  pack {r['pack_s']:.2f} s  "
                f"wall {r['wall_s']:.2f} s  ray start {r['ray_start_s']:.2f} s",
                flush=True,
            )
    med = {e: statistics.median(r["images_per_s"] for r in rs) for e, rs in runs.items()}
    pairs = list(zip(runs["local"], runs["ray"], strict=True))
    ratios = [ray_["images_per_s"] / loc["images_per_s"] for loc, ray_ in pairs]
    shards = runs["ray"][0]["shards"]
    extra = [(ray_["pack_s"] - loc["pack_s"]) / shards for loc, ray_ in pairs]
    task = empty_task_cost()
    result = {
        "images": runs["ray"][0]["images"],
        "shards": shards,
        "median_images_per_s": med,
        "ray_over_local_median_ratio": statistics.median(ratios),
        "ratios": ratios,
        "ray_start_s_median": statistics.median(r["ray_start_s"] for r in runs["ray"]),
        "extra_s_per_shard_median": statistics.median(extra),
        "empty_task_s": task,
        "runs": runs,
    }
    print(
        f"\nmedians of {args.repeats}: local {med['local']:.0f} img/s, ray {med['ray']:.0f} img/s; "
        f"ray/local {result['ray_over_local_median_ratio']:.2f} (pairwise, per run "
        f"{', '.join(f'{x:.2f}' for x in ratios)})\n"
        f"ray start-up {result['ray_start_s_median']:.1f} s (once per pack on a local instance); "
        f"empty task {1e3 * task:.2f} ms; ray engine extra time per shard "
        f"{1e3 * result['extra_s_per_shard_median']:.0f} ms ({shards} shards)"
    )
    if args.s3:
        s3 = s3_leg(args.src, args.max_count)
        result["s3"] = s3
        print(
            f"\nS3 (moto on loopback): {s3['objects']} objects listed in {s3['list_requests']} "
            f"requests ({s3['scan_s']:.2f} s); pack s3->s3 local "
            f"{s3['local']['images_per_s']:.0f} img/s, ray {s3['ray']['images_per_s']:.0f} img/s"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
