"""One full epoch through make_loader vs torchvision ImageFolder + PIL, in the same run.

    python bench/loader_bench.py SHARDS IMAGEFOLDER [--workers 2] [--batch-size 64] [--repeats 2]

Each pipeline runs a fresh DataLoader for a full epoch; runs are interleaved and repeated;
images/s counts samples after the first batch (time to first batch reported apart).
(`wdstool stream-bench` will supersede this script.)
"""

from __future__ import annotations

import argparse
import statistics
import time


def run(loader) -> tuple[float, float]:
    t0 = time.perf_counter()
    it = iter(loader)
    first = next(it)
    t1 = time.perf_counter()
    n = 0
    for batch in it:
        n += len(batch["labels"]) if isinstance(batch, dict) else len(batch[1])
    dt = time.perf_counter() - t1
    _ = first
    return n / dt, t1 - t0


def main() -> None:
    from loaders import make_loader
    from loaders.bench.baselines import imagefolder_loader

    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("imagefolder")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    w, b, s = args.workers, args.batch_size, args.image_size
    pipelines = {
        "wdstool uint8": lambda: make_loader(args.shards, b, image_size=s, num_workers=w),
        "wdstool float": lambda: make_loader(
            args.shards, b, image_size=s, num_workers=w, output="float"
        ),
        "ImageFolder+PIL": lambda: imagefolder_loader(
            args.imagefolder, workers=w, batch_size=b, image_size=s, prefetch_factor=4
        ),
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in pipelines}
    for _ in range(args.repeats):
        for name, make in pipelines.items():
            results[name].append(run(make()))
            print(
                f"{name:<16} {results[name][-1][0]:7.0f} img/s  first batch "
                f"{results[name][-1][1]:.2f} s",
                flush=True,
            )
    base = results["ImageFolder+PIL"]
    print(f"\n{'pipeline':<16} {'img/s (median)':>14} {'first batch':>12} {'vs ImageFolder':>15}")
    for name, runs in results.items():
        ratio = statistics.median(a[0] / c[0] for a, c in zip(runs, base, strict=True))
        print(
            f"{name:<16} {statistics.median(r[0] for r in runs):>14.0f} "
            f"{statistics.median(r[1] for r in runs):>11.2f}s {ratio:>14.2f}x"
        )


if __name__ == "__main__":
    main()
