"""What every peer runner shares: the job's arguments, the recipes, the timed epoch (its memory
monitor in _memory.py).

A runner is ``python bench/peers/peer_NAME.py DATA [--workers 2 --batch-size 64 ...]``: it builds
its pipeline for one full shuffled epoch of DATA (``DATA/images`` ImageFolder tree,
``DATA/shards`` wdstool shards with ``index.json``, ``DATA/peers/`` its converted copies), runs
it, and prints one JSON line of figures. ``--recipe full`` swaps the augmentation for the
full training recipe (``RECIPES``). ``prepare`` as first argument converts the data once
(untimed; cached under ``DATA/peers/``); ``check`` imports the peer and says why it cannot run.
Not part of the library: nothing in wdstool, loaders or shard_writer imports these files.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from _memory import MemoryMonitor

# what every peer delivers: uint8 [B, 3, S, S] images and int64 [B] labels
Batch = tuple[Any, Any]


# the augmentation every peer runs, by --recipe; "full" is wdstool's "trivialaug" preset
# (loaders/recipe/presets.py), torchvision's ta_wide reference recipe
RECIPES = {
    "default": "RandomResizedCrop {S} + horizontal flip",
    "full": "RandomResizedCrop {S} (bicubic, antialiased) + horizontal flip + TrivialAugmentWide "
    "+ RandomErasing(p=0.25)",
}
# the same, as the peers' config strings name the torchvision v2 ops they run
V2_OPS = {
    "default": "v2 RRC+flip",
    "full": "v2 RRC(bicubic)+flip+TrivialAugmentWide+RandomErasing(0.25)",
}


class Skip(Exception):
    """This peer cannot run here; the message says exactly why (shown in the table)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("action", nargs="?", choices=["run", "prepare", "check"], default="run")
    p.add_argument("data", type=Path, help="folder with images/ and shards/ (bench/data)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (or threads)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--prefetch-factor", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--recipe", choices=list(RECIPES), default="default", help="augmentation")
    p.add_argument(
        "--ffcv-max-resolution",
        type=int,
        default=None,
        metavar="N",
        help="FFCV's .beton: images scaled down to a longer side of at most N when written "
        "(its ImageNet practice: 256-512; default: full size); the other peers ignore it",
    )
    p.add_argument(
        "--wdstool-shards",
        default="shards",
        metavar="DIR",
        help="the folder under DATA wdstool's loader reads (default shards; e.g. shards-rm: the "
        "same images packed with --restart-markers); the other peers ignore it",
    )
    # 2 s, as stream-bench --memory: reading smaps_rollup walks a process's page tables
    # (tens of ms each here), and sampling every 0.1 s cost each pipeline 10-13% of its rate
    p.add_argument("--sample-every", type=float, default=2.0, help="memory sampling period, s")
    return p.parse_args(argv)


def manifest(data: Path) -> dict[str, Any]:
    path = data / "shards" / "index.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(
            f"{path}: not a readable wdstool manifest ({e}); run `make bench-peers`"
        ) from e


def shard_paths(data: Path) -> list[str]:
    """The shards of DATA/shards, in manifest order, as absolute local paths."""
    root = (data / "shards").resolve()
    return [str(root / s["url"]) for s in manifest(data)["shardlist"]]


def image_files(data: Path) -> tuple[list[str], list[int]]:
    """ImageFolder's view of DATA/images: files and labels (classes sorted by name)."""
    root = (data / "images").resolve()
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    files: list[str] = []
    labels: list[int] = []
    for i, c in enumerate(classes):
        for f in sorted((root / c).iterdir()):
            if f.suffix.lower() in (".jpg", ".jpeg"):
                files.append(str(f))
                labels.append(i)
    return files, labels


def fingerprint(data: Path) -> str:
    """Names the data a conversion was made from (the manifest's layout fingerprint)."""
    return str(manifest(data).get("fingerprint", ""))


def cached(out: Path, data: Path) -> bool:
    """True when ``out`` holds a finished conversion of this very data set."""
    stamp = out / ".wdstool-source"
    return stamp.is_file() and stamp.read_text() == fingerprint(data)


def mark_cached(out: Path, data: Path) -> None:
    (out / ".wdstool-source").write_text(fingerprint(data))


def rrc_box(width: int, height: int, rng: random.Random) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop draw (scale 0.08-1, ratio 3/4-4/3, 10 tries, then the
    central crop): (left, top, w, h). For peers that crop outside torchvision (SPDL)."""
    area = width * height
    log_ratio = (math.log(3 / 4), math.log(4 / 3))
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * ratio))
        h = round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    in_ratio = width / height
    if in_ratio < 3 / 4:
        w, h = width, round(width / (3 / 4))
    elif in_ratio > 4 / 3:
        w, h = round(height * (4 / 3)), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def recipe_ops(image_size: int, recipe: str = "default", *, pil: bool = False) -> list[Any]:
    """The recipe as torchvision v2 ops, for a uint8 CHW tensor (``pil``: for a PIL image, with
    ``PILToTensor`` where the recipe leaves PIL: before RandomErasing, which passes PIL through
    untouched). default: RandomResizedCrop (bilinear, antialiased) + flip; full: the same crop
    bicubic + flip + TrivialAugmentWide + RandomErasing(p=0.25), as torchvision's references."""
    from torchvision.transforms import v2

    if recipe == "default":
        ops = [v2.RandomResizedCrop(image_size, antialias=True), v2.RandomHorizontalFlip()]
        return [*ops, v2.PILToTensor()] if pil else ops
    bicubic = v2.InterpolationMode.BICUBIC
    ops = [
        v2.RandomResizedCrop(image_size, interpolation=bicubic, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.TrivialAugmentWide(),
    ]
    return [*ops, *([v2.PILToTensor()] if pil else []), v2.RandomErasing(p=0.25)]


def tensor_augment(image_size: int, recipe: str = "default") -> Callable[[Any], Any]:
    """``recipe_ops`` as one v2 pipeline on a uint8 CHW tensor: the augmentation of the peers
    that decode with ``torchvision.io``."""
    from torchvision.transforms import v2

    return v2.Compose(recipe_ops(image_size, recipe))


def decode_jpeg(data: Any) -> Any:
    """JPEG bytes -> uint8 RGB CHW tensor (libjpeg-turbo through ``torchvision.io``). With the
    same v2 augmentation after it, about 1.4x PIL (decode, v2 on the PIL image, PILToTensor)
    on this project's machine: 210-217 vs 149-157 images/s in one process over 300 of the
    bench images; so the peers that decode in Python use it."""
    import torch
    from torchvision.io import ImageReadMode
    from torchvision.io import decode_jpeg as _decode

    with warnings.catch_warnings():  # read-only bytes: the decoder only reads them
        warnings.simplefilter("ignore", UserWarning)
        buf = torch.frombuffer(data, dtype=torch.uint8)
    return _decode(buf, mode=ImageReadMode.RGB)


def run_epoch(
    name: str,
    build: Callable[[], Iterable[Batch]],
    args: argparse.Namespace,
    expected: int,
    config: dict[str, Any],
) -> dict[str, Any]:
    """Build the pipeline and drain one epoch, as a training loop would (no step time).

    Times: ``epoch_s`` from the start of ``build()`` to the last batch (what an epoch costs,
    start-up included), ``first_batch_s``, and ``samples_per_s`` over the batches after the
    first (the steady rate, as ``wdstool stream-bench`` reports it). Checks that every batch
    is uint8 [B, 3, S, S] and that the epoch held ``expected`` samples."""
    import torch

    size = args.image_size
    samples = batches = 0
    first_at = t_after_first = None
    with MemoryMonitor(args.sample_every) as mon:
        t0 = time.perf_counter()
        pipeline = build()
        for images, labels in pipeline:
            if first_at is None:
                first_at = time.perf_counter()
                if images.dtype != torch.uint8 or tuple(images.shape[1:]) != (3, size, size):
                    raise SystemExit(
                        f"{name}: batch is {images.dtype} {tuple(images.shape)}, "
                        f"expected uint8 [B, 3, {size}, {size}]"
                    )
                if len(labels) != len(images):
                    raise SystemExit(f"{name}: {len(labels)} labels for {len(images)} images")
                t_after_first = time.perf_counter()
                first_n = len(images)
            samples += len(images)
            batches += 1
        end = time.perf_counter()
    if samples != expected:
        raise SystemExit(f"{name}: the epoch held {samples} samples, expected {expected}")
    steady = end - t_after_first if t_after_first is not None else 0.0
    return {
        "peer": name,
        "samples": samples,
        "batches": batches,
        "epoch_s": round(end - t0, 4),
        "first_batch_s": round((first_at or end) - t0, 4),
        "samples_per_s": round((samples - first_n) / steady, 2) if steady > 0 else 0.0,
        "epoch_samples_per_s": round(samples / (end - t0), 2),
        "peak_rss_mb": round(mon.peak_rss / 2**20, 1),
        "peak_pss_mb": round(mon.peak_pss / 2**20, 1) if mon.peak_pss is not None else None,
        "peak_processes": mon.peak_procs,
        "workers": args.workers,
        "batch_size": args.batch_size,
        "image_size": size,
        "seed": args.seed,
        "recipe": args.recipe,
        "config": config,
    }


def main(
    name: str,
    *,
    build: Callable[[argparse.Namespace], Iterable[Batch]],
    config: Callable[[argparse.Namespace], dict[str, Any]],
    check: Callable[[argparse.Namespace], None] | None = None,
    prepare: Callable[[argparse.Namespace], None] | None = None,
    expected: Callable[[argparse.Namespace], int] | None = None,
) -> None:
    """The runner's command line: ``check``, ``prepare`` or ``run`` (one JSON line)."""
    args = parse_args()
    try:
        if check is not None:
            check(args)
    except Skip as e:
        print(json.dumps({"peer": name, "skip": str(e)}))
        return
    if args.action == "check":
        print(json.dumps({"peer": name, "ok": True}))
        return
    if args.action == "prepare":
        t = time.perf_counter()
        if prepare is not None:
            prepare(args)
        print(json.dumps({"peer": name, "prepared_s": round(time.perf_counter() - t, 2)}))
        return
    n = expected(args) if expected else int(manifest(args.data)["num_samples"])
    result = run_epoch(name, lambda: build(args), args, n, config(args))
    print(json.dumps(result))
