"""Training recipes on the fast path, against upstream webdataset + torchvision running the same
recipe (issues 24 and 25): one full epoch per run, every run a fresh process, rounds interleaved,
ratios pair by pair (same round).

    python bench/recipe_bench.py DATA [--rounds 3] [--workers 2] [--set recipes|schedules|large|restart]
        [--baseline-path OLD_CHECKOUT] [--out bench/results/recipes]

Pipelines (``NAME``, run alone with ``python bench/recipe_bench.py run NAME DATA``):
- ``wdstool:PRESET``: ``make_loader(transform=<loaders.recipe.presets PRESET>)``;
- ``webdataset:PRESET``: upstream webdataset, ``torchvision.io.decode_image`` + the same v2
  pipeline on the whole image, ``.batched()`` in the workers (``loaders.bench.baselines``);
- ``whole:PRESET``: the loader with the partial decoder off (``WDSTOOL_PARTIAL_DECODE=0``): the
  same recipe on the whole-decode path;
- ``ceiling:PRESET``: the recipe alone (fused head + seeded tail) in as many processes, no loader;
- ``wdstool:dino`` / ``webdataset:dino``: DINO's multi-crop (2 x 224 at scale 0.32-1 + 8 x 96
  at 0.05-0.32, bicubic, flip): ``views=`` against one decode per sample cropped ten times;
- ``wdstool:size160`` / ``wdstool:size224``: the built-in recipe at 160 and 224 px;
- ``NAME@DIR``: pipeline NAME on DATA/DIR instead of DATA/shards (``--set restart``: DIR =
  shards-rm, the same images packed with ``--restart-markers``);
- ``old:default``: the built-in recipe of the checkout at ``--baseline-path`` (the code before
  recipes), against ``wdstool:default``;
- ``--set libraries``: timm's, torchvision v1's tutorial and their eval recipes through
  wdstool, timm's own loader, upstream webdataset and ImageFolder (``bench/library_recipes.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SETS = {
    "recipes": [
        ("wdstool:bicubic", "wdstool:default"),
        ("wdstool:bicubic", "webdataset:bicubic"),
        ("wdstool:trivialaug", "webdataset:trivialaug"),
        ("wdstool:trivialaug", "ceiling:trivialaug"),
        ("wdstool:default", "old:default"),
    ],
    "schedules": [
        ("wdstool:dino", "webdataset:dino"),
        ("wdstool:size160", "wdstool:size224"),
    ],
    # issue 34: the recipes users already have (bench/library_recipes.py), through wdstool and
    # through the loaders they come with
    "libraries": [
        ("wdstool:timm-train", "timm:timm-train"),
        ("wdstool:timm-train", "webdataset:timm-train"),
        ("wdstool:tutorial", "imagefolder:tutorial"),
        ("wdstool:timm-eval", "timm:timm-eval"),
        ("wdstool:timm-eval", "webdataset:timm-eval"),
        ("wdstool:tutorial-eval", "imagefolder:tutorial-eval"),
    ],
    # the code before a change (--baseline-path) on the same data: "no slower than before"
    "baseline": [
        ("wdstool:default", "old:default"),
        ("wdstool:trivialaug", "old:trivialaug"),
    ],
    # issue 38: DATA/shards-rm holds the same images packed with --restart-markers
    "restart": [
        ("wdstool:trivialaug@shards-rm", "whole:trivialaug"),
        ("wdstool:trivialaug@shards-rm", "wdstool:trivialaug"),
        ("wdstool:default@shards-rm", "whole:default"),
        ("wdstool:default@shards-rm", "wdstool:default"),
    ],
    "large": [
        ("wdstool:trivialaug", "whole:trivialaug"),
        ("wdstool:bicubic", "whole:bicubic"),
        ("wdstool:size160", "wdstool:size224"),
    ],
}


def _dino() -> list[tuple[Any, int]]:
    from torchvision.transforms import v2

    bicubic = v2.InterpolationMode.BICUBIC
    glob = v2.Compose(
        [v2.RandomResizedCrop(224, (0.32, 1), interpolation=bicubic), v2.RandomHorizontalFlip()]
    )
    local = v2.Compose(
        [v2.RandomResizedCrop(96, (0.05, 0.32), interpolation=bicubic), v2.RandomHorizontalFlip()]
    )
    return [(glob, 2), (local, 8)]


class _DecodeViews:
    """Upstream's multi-crop: decode once, run each view's pipeline (picklable)."""

    def __init__(self, views: list[tuple[Any, int]]) -> None:
        self.views = views

    def __call__(self, data: bytes) -> list[Any]:
        import torch
        from torchvision.io import ImageReadMode, decode_image

        img = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), ImageReadMode.RGB)
        return [tf(img) for tf, count in self.views for _ in range(count)]


def _collate_views(batch: list[Any]) -> list[Any]:
    import torch

    crops, labels = zip(*batch, strict=True)
    return [torch.stack(v) for v in zip(*crops, strict=True)], torch.tensor(labels)


def build(name: str, data: Path, workers: int, batch: int) -> tuple[Any, Any]:
    """The pipeline ``name`` and a function giving a batch's sample count."""
    kind, _, what = name.partition(":")
    what, _, folder = what.partition("@")  # NAME@DIR: DATA/DIR instead of DATA/shards
    shards = data / (folder or "shards")
    sys.path.insert(0, str(HERE))
    from library_recipes import RECIPES
    from library_recipes import build as build_library

    if what in RECIPES:
        return build_library(kind, what, data, workers, batch)
    if kind in ("wdstool", "whole", "old"):
        from loaders import make_loader

        kw: dict[str, Any] = dict(num_workers=workers, seed=0)
        if what == "dino":
            kw["views"] = _dino()
        elif what.startswith("size"):
            kw["image_size"] = int(what[4:])
        elif what != "default":
            from loaders.recipe.presets import resolve_transform

            kw["transform"] = resolve_transform(what, 224).transform
        return make_loader(str(shards), batch, **kw), lambda b: len(b["keys"])
    if kind == "webdataset":
        import webdataset as wds

        from loaders.bench.baselines import webdataset_loader
        from loaders.recipe.presets import resolve_transform
        from loaders.source import resolve_source

        urls = list(resolve_source(str(shards)).urls)
        if what != "dino":
            recipe = resolve_transform(what, 224).transform
            loader = webdataset_loader(
                urls,
                workers=workers,
                batch_size=batch,
                image_size=224,
                prefetch_factor=4,
                recipe=recipe,
                shuffle_buffer=2000,
            )
            return loader, lambda b: len(b[1])
        ds = (
            wds.WebDataset(
                urls, nodesplitter=wds.split_by_node, shardshuffle=len(urls), empty_check=False
            )
            .shuffle(2000)
            .to_tuple("jpg;png;jpeg;webp", "cls")
            .map_tuple(_DecodeViews(_dino()), int)
            .batched(batch, partial=True, collation_fn=_collate_views)
        )
        loader = wds.WebLoader(ds, batch_size=None, num_workers=workers, prefetch_factor=4)
        return loader, lambda b: len(b[1])
    raise SystemExit(f"unknown pipeline {name!r}")


def run_one(name: str, data: Path, workers: int, batch: int) -> dict[str, Any]:
    kind, _, what = name.partition(":")
    if kind == "ceiling":
        from loaders.bench.baselines import ceiling
        from loaders.recipe.presets import resolve_transform
        from loaders.source import resolve_source

        tf = resolve_transform(what, 224).transform
        index = resolve_source(str(data / "shards"))
        got = ceiling(index, processes=workers, image_size=224, output="auto", transform=tf)
        return {"pipeline": name, "samples_per_s": got["samples_per_s"], "samples": got["samples"]}
    loader, count = build(name, data, workers, batch)
    t0 = time.perf_counter()
    first = None
    samples = 0
    for b in loader:
        if first is None:
            first, first_n = time.perf_counter(), count(b)
        samples += count(b)
    end = time.perf_counter()
    rate = (samples - first_n) / (end - first) if first and end > first else 0.0
    return {
        "pipeline": name,
        "samples": samples,
        "samples_per_s": round(rate, 1),
        "first_batch_s": round((first or end) - t0, 3),
    }


def _spawn(name: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if name.startswith("whole:"):
        env["WDSTOOL_PARTIAL_DECODE"] = "0"
    if name.startswith("old:"):
        if not args.baseline_path:
            raise SystemExit("old:... needs --baseline-path (a checkout of the code before)")
        env["PYTHONPATH"] = str(Path(args.baseline_path).resolve())
    cmd = [sys.executable, str(Path(__file__).resolve()), "run", name, str(args.data)]
    cmd += ["--workers", str(args.workers), "--batch-size", str(args.batch_size)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("action", nargs="?", default="bench", choices=["bench", "run"])
    p.add_argument("name", nargs="?", help="with run: one pipeline")
    p.add_argument("data", type=Path, nargs="?", default=Path("bench/data"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--set", default="recipes", choices=sorted(SETS))
    p.add_argument("--baseline-path", default=None)
    p.add_argument("--out", default=None, help="write OUT.json and OUT.md")
    argv = sys.argv[1:]
    if argv and argv[0] not in ("bench", "run", "-h", "--help"):
        argv = ["bench", "", *argv]  # DATA first: the benchmark
    elif argv[:1] == ["bench"]:
        argv = ["bench", "", *argv[1:]]
    args = p.parse_args(argv)
    if args.action == "run":
        print(json.dumps(run_one(args.name, args.data, args.workers, args.batch_size)))
        return
    pairs = SETS[args.set]
    if not args.baseline_path:
        pairs = [pr for pr in pairs if not pr[1].startswith("old:")]
    rates: dict[str, list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for a, b in pairs:
            order = (a, b) if r % 2 == 0 else (b, a)
            got = {n: _spawn(n, args)["samples_per_s"] for n in order}
            for n, v in got.items():
                rates.setdefault(n, []).append(v)
            ratios.setdefault((a, b), []).append(got[a] / got[b] if got[b] else float("nan"))
            print(f"round {r}: {a} {got[a]:.0f}/s, {b} {got[b]:.0f}/s", file=sys.stderr)
    report = {
        "data": str(args.data),
        "workers": args.workers,
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "rates": {n: {"median": statistics.median(v), "all": v} for n, v in rates.items()},
        "ratios": [
            {"a": a, "b": b, "median": statistics.median(v), "min": min(v), "max": max(v)}
            for (a, b), v in ratios.items()
        ],
    }
    lines = [
        f"# `python bench/recipe_bench.py {args.data} --set {args.set} --rounds {args.rounds}`",
        "",
        f"{args.workers} workers, batch {args.batch_size}, one full epoch per run, a fresh "
        "process each, pairs interleaved (order alternating by round); samples/s after the "
        "first batch, medians.",
        "",
        "| pipeline | samples/s (median) | runs |",
        "|---|---:|---|",
        *(
            f"| `{n}` | {statistics.median(v):,.0f} | {', '.join(f'{x:.0f}' for x in v)} |"
            for n, v in rates.items()
        ),
        "",
        "| ratio | median | range |",
        "|---|---:|---|",
        *(
            f"| `{r['a']}` ÷ `{r['b']}` | **{r['median']:.2f}** | {r['min']:.2f}–{r['max']:.2f} |"
            for r in report["ratios"]
        ),
    ]
    print("\n".join(lines))
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(report, indent=1))
        Path(args.out + ".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
