"""Pack throughput: `wdstool pack` (1 and 2 workers) against a bare webdataset.ShardWriter loop.

    python bench/pack_bench.py SRC [--repeats 3] [--max-count 1000] [--json out.json]

Runs are interleaved (bare, pack -w1, pack -w2, ...) so machine noise hits all alike; the page
cache is warmed first and flushed (untimed) before each run. "+sync" variants include making
the output durable (pack's final fsync; `os.sync()` after the bare loop); the others are
page-cache figures (`pack --no-sync`). Reports medians and pairwise ratios.
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

from shard_writer.pack import PackOptions, pack
from shard_writer.scan import scan_imagefolder


def bare_shardwriter(src: str, dest: Path, max_count: int) -> tuple[int, int]:
    """The loop a user writes by hand: read each file, write key.jpg/key.cls with ShardWriter."""
    import webdataset as wds  # imported here: spawned pack workers re-import this module

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
    ap.add_argument("--tmp", default=None, help="where outputs go (default: the system temp dir)")
    args = ap.parse_args()
    for p in Path(args.src).rglob("*"):  # warm the page cache
        if p.is_file():
            p.read_bytes()
    names = ["bare", "pack-w1", "pack-w2", "bare+sync", "pack-w1+sync", "pack-w2+sync"]
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
    for _ in range(args.repeats):
        for name in names:
            out = Path(tempfile.mkdtemp(prefix="packbench-", dir=args.tmp))
            os.sync()  # untimed: no run pays for the previous run's write-back
            durable = name.endswith("+sync")
            t = time.perf_counter()
            if name.startswith("bare"):
                n, nbytes = bare_shardwriter(args.src, out, args.max_count)
                if durable:
                    os.sync()  # what pack's final fsync costs, for a like-for-like comparison
            else:
                options = PackOptions(workers=int(name[6]), max_count=args.max_count, sync=durable)
                s = pack(args.src, str(out / "ds"), options)
                n, nbytes = s.samples, s.source_bytes
            dt = time.perf_counter() - t
            results[name].append((n / dt, nbytes / 1e6 / dt))
            shutil.rmtree(out)
    med = {
        k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
        for k, v in results.items()
    }
    print(f"{'pipeline':<13} {'images/s':>10} {'MB/s':>8}   runs (images/s)")
    for k, (ips, mbs) in med.items():
        runs = ", ".join(f"{x[0]:.0f}" for x in results[k])
        print(f"{k:<13} {ips:>10.0f} {mbs:>8.1f}   {runs}")
    for sfx in ("", "+sync"):
        for a_name, b_name in ((f"pack-w1{sfx}", f"bare{sfx}"), (f"pack-w2{sfx}", f"pack-w1{sfx}")):
            r = [a[0] / b[0] for a, b in zip(results[a_name], results[b_name], strict=True)]
            print(
                f"{a_name:>13} / {b_name:<13} median {statistics.median(r):.2f} "
                f"(range {min(r):.2f}-{max(r):.2f})"
            )
    if args.json:
        args.json.write_text(json.dumps({"runs": results, "median": med}, indent=1))


if __name__ == "__main__":
    main()
