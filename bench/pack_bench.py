"""Pack throughput: `wdstool pack` (1 and 2 workers) against a bare webdataset.ShardWriter loop.

    python bench/pack_bench.py SRC [--repeats 3] [--max-count 1000] [--json out.json]

Runs are interleaved (bare, pack -w1, pack -w2, bare, ...) so machine noise hits all alike; the
page cache is warmed first. Reports the median images/s and MB/s of each and the ratios.
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

import webdataset as wds

from shard_writer.pack import PackOptions, pack
from shard_writer.scan import scan_imagefolder


def bare_shardwriter(src: str, dest: Path, max_count: int) -> tuple[int, int]:
    """The loop a user writes by hand: read each file, write key.jpg/key.cls with ShardWriter."""
    scan = scan_imagefolder(src)
    dest.mkdir(parents=True, exist_ok=True)
    nbytes = 0
    with wds.ShardWriter(str(dest / "train-%06d.tar"), maxcount=max_count, verbose=0) as sink:
        for f in scan.files:
            with open(os.path.join(src, f.relpath), "rb") as fh:
                data = fh.read()
            nbytes += len(data)
            sink.write({"__key__": f"{f.index:09d}", "jpg": data, "cls": f.class_idx})
    return len(scan.files), nbytes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-count", type=int, default=1000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    for p in Path(args.src).rglob("*"):  # warm the page cache
        if p.is_file():
            p.read_bytes()
    results: dict[str, list[tuple[float, float]]] = {"bare": [], "pack-w1": [], "pack-w2": []}
    for _ in range(args.repeats):
        for name in results:
            out = Path(tempfile.mkdtemp(prefix="packbench-"))
            t = time.perf_counter()
            if name == "bare":
                n, nbytes = bare_shardwriter(args.src, out, args.max_count)
            else:
                s = pack(
                    args.src,
                    str(out / "ds"),
                    PackOptions(workers=int(name[-1]), max_count=args.max_count),
                )
                n, nbytes = s.samples, s.source_bytes
            dt = time.perf_counter() - t
            results[name].append((n / dt, nbytes / 1e6 / dt))
            shutil.rmtree(out)
    med = {
        k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
        for k, v in results.items()
    }
    print(f"{'pipeline':<10} {'images/s':>10} {'MB/s':>8}   runs (images/s)")
    for k, (ips, mbs) in med.items():
        runs = ", ".join(f"{x[0]:.0f}" for x in results[k])
        print(f"{k:<10} {ips:>10.0f} {mbs:>8.1f}   {runs}")
    r1 = [a[0] / b[0] for a, b in zip(results["pack-w1"], results["bare"], strict=True)]
    r2 = [a[0] / b[0] for a, b in zip(results["pack-w2"], results["pack-w1"], strict=True)]
    print(
        f"pack -w1 / bare ShardWriter: median {statistics.median(r1):.2f} "
        f"(range {min(r1):.2f}-{max(r1):.2f})"
    )
    print(
        f"pack -w2 / pack -w1:         median {statistics.median(r2):.2f} "
        f"(range {min(r2):.2f}-{max(r2):.2f})"
    )
    if args.json:
        args.json.write_text(json.dumps({"runs": results, "median": med}, indent=1))


if __name__ == "__main__":
    main()
