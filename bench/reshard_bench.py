"""Reshard throughput against `cp` of the same bytes on the same disk, and reshard's peak memory
at two data set sizes.

    python bench/reshard_bench.py SHARDS [--repeats 3] [--workers 1,2] [--max-count 1000]
        [--shards N] [--memory-shards 2,10] [--json out.json]

SHARDS is a data set folder (``make bench`` writes the standard set to bench/data/shards);
``--shards N`` takes its first N shards only. Throughput: runs interleaved (cp, reshard -wN
--no-sync, ..., then the same with durability: cp + sync, reshard), page cache warm, write-back
flushed untimed before each run, a fresh output folder each time; MB/s of source shard bytes,
medians, and reshard/cp ratios pair by pair; and the CPU seconds (user + system, the process and
its workers) each spends per GB, a figure other load on a shared machine disturbs less. Memory: `wdstool reshard` runs as its own process
on the first M shards for each M of ``--memory-shards``; the peak of the summed PSS of its
process tree (the CLI and its worker processes, sampled every 50 ms) is reported for each, so
one sees whether memory grows with the data set. Floor (``--floor``): what a shuffled copy of
these bytes costs at the least, each part alone in one process: the source headers scanned
(reshard's own scan), every sample's bytes copied in the kernel (``copy_file_range``, no Python
per byte) in a seeded shuffled order into one file, and sha256 over the same bytes (index.json
records every shard's digest); their CPU seconds per GB, and the MB/s that the sum of them
allows on ``--workers``' largest count of cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from shard_writer.options import ReshardOptions
from shard_writer.probe import EncodeOptions
from shard_writer.reshard import reshard
from shard_writer.tar_sources import scan_shard


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        return []
    return out


def _tree_pss_mb(root: int) -> float:
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += _children(pid)
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next((int(ln.split()[1]) for ln in f if ln.startswith("Pss:")), 0)
        except OSError:
            pass
    return total / 1024


def _cpu_seconds() -> float:
    """User + system CPU of this process and its finished children (cp, pool workers)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def pattern(shards: list[Path]) -> str:
    """A brace pattern naming exactly these shards (one shard: its path)."""
    if len(shards) == 1:
        return str(shards[0])
    return f"{shards[0].parent}/{{{','.join(p.name for p in shards)}}}"


def peak_memory(shards: list[Path], workers: int, max_count: int) -> tuple[float, float]:
    """(peak PSS of the process tree in MB, seconds) of one `wdstool reshard` CLI run."""
    out = Path(tempfile.mkdtemp(prefix="reshard-mem-"))
    cmd = [sys.executable, "-m", "wdstool", "reshard", pattern(shards), str(out / "ds")]
    cmd += ["-q", "--no-sync"]
    cmd += ["--workers", str(workers), "--max-count", str(max_count)]
    peak = [0.0]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], _tree_pss_mb(proc.pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    rc = proc.wait()
    stop.set()
    thread.join()
    seconds = time.perf_counter() - t
    shutil.rmtree(out)
    if rc:
        raise SystemExit(f"reshard failed ({rc}): {' '.join(cmd)}")
    return peak[0], seconds


def floor(shards: list[Path], cores: int) -> dict[str, float]:
    """CPU seconds per GB of the scan, a shuffled in-kernel copy and sha256, each alone."""
    nbytes = sum(p.stat().st_size for p in shards)
    spans: list[tuple[int, int, int]] = []
    c = _cpu_seconds()
    for i, p in enumerate(shards):
        spans += [
            (i, f.piece.start, f.piece.end)
            for f in scan_shard(str(p), i, None, False, EncodeOptions()).samples
        ]
    scan = _cpu_seconds() - c
    random.Random(0).shuffle(spans)
    fds = [os.open(p, os.O_RDONLY) for p in shards]
    out = Path(tempfile.mkdtemp(prefix="reshard-floor-"))
    os.sync()
    c = _cpu_seconds()
    dst = os.open(out / "copy.bin", os.O_WRONLY | os.O_CREAT)
    for i, a, b in spans:
        while a < b:
            a += os.copy_file_range(fds[i], dst, b - a, a)
    os.close(dst)
    copy = _cpu_seconds() - c
    maps = [memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ)) for fd in fds]
    c = _cpu_seconds()
    digest = hashlib.sha256()
    for i, a, b in spans:
        digest.update(maps[i][a:b])
    sha = _cpu_seconds() - c
    for m in maps:
        m.release()
    for fd in fds:
        os.close(fd)
    shutil.rmtree(out)
    gb = nbytes / 1e9
    out_s = {"scan": scan / gb, "copy": copy / gb, "sha256": sha / gb}
    out_s["mb_per_s_bound"] = 1e3 / (sum(out_s.values()) / cores)
    return out_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shards", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--max-count", type=int, default=1000)
    ap.add_argument("--shards", dest="nshards", type=int, default=None)
    ap.add_argument("--memory-shards", default="2,10")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tmp", default=None, help="where outputs go (default: the system temp dir)")
    ap.add_argument("--floor", action="store_true", help="also time the floor (see above)")
    args = ap.parse_args()
    manifest = json.loads((args.shards / "index.json").read_text())
    shards = [args.shards / e["url"] for e in manifest["shardlist"]][: args.nshards]
    nbytes = sum(p.stat().st_size for p in shards)
    for p in shards:  # warm the page cache
        p.read_bytes()
    src = pattern(shards)
    workers = [int(w) for w in args.workers.split(",")]
    names = ["cp", *(f"reshard-w{w}" for w in workers)]
    names += [f"{n}+sync" for n in names]
    results: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.repeats):
        for name in names:
            out = Path(tempfile.mkdtemp(prefix="reshard-bench-", dir=args.tmp))
            os.sync()  # untimed: no run pays for the previous run's write-back
            durable = name.endswith("+sync")
            c = _cpu_seconds()
            t = time.perf_counter()
            if name.startswith("cp"):
                subprocess.run(["cp", *map(str, shards), str(out)], check=True)
                if durable:
                    os.sync()
            else:
                w = int(name.split("-w")[1].split("+")[0])
                options = ReshardOptions(workers=w, max_count=args.max_count, sync=durable)
                reshard([src], str(out / "ds"), options)
            results[name].append(nbytes / 1e6 / (time.perf_counter() - t))
            cpu[name].append((_cpu_seconds() - c) / (nbytes / 1e9))
            shutil.rmtree(out)
    print(
        f"{len(shards)} shards, {nbytes / 1e6:.0f} MB, {sum(e['nsamples'] for e in manifest['shardlist'][: len(shards)])} samples"
    )
    print(f"{'run':<16} {'MB/s':>8} {'CPU s/GB':>9}   runs (MB/s)")
    for name, runs in results.items():
        print(
            f"{name:<16} {statistics.median(runs):>8.0f} {statistics.median(cpu[name]):>9.2f}"
            f"   {', '.join(f'{r:.0f}' for r in runs)}"
        )
    for sfx in ("", "+sync"):
        for w in workers:
            a, b = results[f"reshard-w{w}{sfx}"], results[f"cp{sfx}"]
            r = [x / y for x, y in zip(a, b, strict=True)]
            print(
                f"reshard-w{w}{sfx} / cp{sfx}: median {statistics.median(r):.2f} (range {min(r):.2f}-{max(r):.2f})"
            )
    memory = {}
    for m in (int(x) for x in args.memory_shards.split(",")):
        chosen = [args.shards / e["url"] for e in manifest["shardlist"]][:m]
        pss, seconds = peak_memory(chosen, max(workers), args.max_count)
        n = sum(e["nsamples"] for e in manifest["shardlist"][:m])
        memory[m] = {"samples": n, "peak_pss_mb": round(pss, 1), "seconds": round(seconds, 2)}
        print(
            f"memory: {m} shards ({n} samples): peak PSS of the process tree {pss:.0f} MB ({seconds:.1f} s, {max(workers)} workers)"
        )
    bound = {}
    if args.floor:
        runs = [floor(shards, max(workers)) for _ in range(args.repeats)]
        bound = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"floor, CPU s/GB alone: scan {bound['scan']:.2f}, shuffled in-kernel copy "
            f"{bound['copy']:.2f}, sha256 {bound['sha256']:.2f} -> at most "
            f"{bound['mb_per_s_bound']:.0f} MB/s on {max(workers)} cores "
            f"({bound['mb_per_s_bound'] / statistics.median(results['cp']):.2f} of cp)"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"mb_per_s": results, "cpu_s_per_gb": cpu, "memory": memory, "floor": bound},
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
