"""How long ``wdstool show`` takes, and how many bytes it reads against what it shows.

    python bench/show_bench.py SHARDS [--samples 64] [--repeats 3] [--s3]

SHARDS is a packed data set folder (index.json + shards). Each repeat runs
``wdstool show SHARDS --out DIR --samples N --json`` as a fresh process (imports included, as a
user waits for it) and records its wall time, its CPU time (user + system: what a busy
machine's wall time would be on a quiet one, roughly) and the bytes it read (its own count, which
tests/show/test_s3.py checks against a counting proxy). ``--s3`` also uploads the shards to a
local S3 server (moto, its own process, 127.0.0.1) and runs the same against
``s3://.../PREFIX``. Medians are printed, with each run's figures in ``--json FILE``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_show(source: str, samples: int, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "wdstool", "show", source, "--out", f"{tmp}/report",
             "--samples", str(samples), "--json", "-q"],
            capture_output=True, text=True, env={**os.environ, **env}, check=True,
        )  # fmt: skip
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    reads = json.loads(proc.stdout)["reads"]
    return {"seconds": round(wall, 2), "cpu_seconds": round(cpu, 2), **reads}


def upload(shards: Path, s3) -> str:
    bucket = "show-bench"
    s3.make_bucket(bucket)
    client = s3.client()
    for f in sorted(shards.iterdir()):
        if f.is_file():
            with open(f, "rb") as body:
                client.put_object(Bucket=bucket, Key=f"set/{f.name}", Body=body)
    return f"s3://{bucket}/set"


def summary(name: str, runs: list[dict]) -> str:
    secs = [r["seconds"] for r in runs]
    cpu = statistics.median(r["cpu_seconds"] for r in runs)
    r = runs[0]
    return (
        f"{name:6s} {statistics.median(secs):6.2f} s (min {min(secs):.2f}, {len(secs)} runs; "
        f"CPU {cpu:.2f} s)  "
        f"read {r['bytes'] / 1e6:.2f} MB in {r['requests']} requests; shown "
        f"{r['shown_bytes'] / 1e6:.2f} MB + manifest {r['manifest_bytes'] / 1e3:.1f} KB: "
        f"{r['ratio']:.2f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shards", type=Path)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--s3", action="store_true", help="also from a local S3 server (moto)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    results: dict[str, list[dict]] = {"local": []}
    if not args.s3:
        for _ in range(args.repeats):
            results["local"].append(run_show(str(args.shards), args.samples, {}))
    else:
        from wdstool.base.locals3 import LocalS3

        with LocalS3() as s3:
            url = upload(args.shards, s3)
            results["s3"] = []
            for _ in range(args.repeats):  # interleaved: both see the same machine load
                results["local"].append(run_show(str(args.shards), args.samples, {}))
                results["s3"].append(run_show(url, args.samples, s3.env))
    for name, runs in results.items():
        print(summary(name, runs))
    if args.json:
        args.json.write_text(json.dumps({"samples": args.samples, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
