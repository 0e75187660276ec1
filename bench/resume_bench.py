"""Time to first batch: a fresh epoch against a resume at 90 % of the epoch (same topology and
elastic 1 -> 2 ranks' share), in the same run.

    python bench/resume_bench.py SHARDS [--workers 2] [--repeats 3]

Each measurement builds a new loader (workers started fresh), loads the state when resuming,
and times until the first batch arrives. The resumed epoch re-reads at most one shuffle block
per worker (compressed bytes, nothing decoded) before its first batch.
"""

from __future__ import annotations

import argparse
import statistics
import time


def first_batch(source: str, workers: int, state=None, **kw) -> tuple[float, int]:
    from loaders import make_loader

    loader = make_loader(source, 64, image_size=224, num_workers=workers, seed=0, **kw)
    t0 = time.perf_counter()
    if state is not None:
        loader.load_state_dict(state)
    it = iter(loader)
    next(it)
    return time.perf_counter() - t0, len(loader) - loader.start_batch


def state_at(source: str, workers: int, fraction: float, **kw) -> dict:
    """A state as saved after ``fraction`` of an epoch (computed without running it: the state
    holds only counts, so a loader that never ran can describe any point)."""
    from loaders import make_loader

    loader = make_loader(source, 64, image_size=224, num_workers=workers, seed=0, **kw)
    state = loader.state_dict()
    k = int(len(loader) * fraction)
    state["batches"] = k
    state["segments"][-1]["batches"] = k
    return state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shards")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    w = args.workers
    same = state_at(args.shards, w, 0.9)
    elastic = state_at(args.shards, w, 0.9, rank=0, world_size=1)
    runs: dict[str, list[float]] = {"fresh": [], "resume 90%": [], "elastic 1->2, 90%": []}
    for rep in range(args.repeats):
        for name, kw in (
            ("fresh", {}),
            ("resume 90%", {"state": same}),
            ("elastic 1->2, 90%", {"state": elastic, "rank": 0, "world_size": 2}),
        ):
            seconds, n = first_batch(args.shards, w, **kw)
            runs[name].append(seconds)
            print(f"repeat {rep + 1}: {name:<18} first batch {seconds:.3f} s ({n} batches left)")
    print(f"\nmedians of {args.repeats} ({w} workers, batch 64, 224 px):")
    for name, values in runs.items():
        print(f"  {name:<18} {statistics.median(values):.3f} s")


if __name__ == "__main__":
    main()
