"""The recipes users already have, through wdstool and through the loaders they come with (issue 34).

Recipes (224 px, normalized float batches, as the libraries hand them to a model):
- ``timm-train``: ``timm.data.create_transform(224, is_training=True,
  auto_augment="rand-m9-mstd0.5-inc1", interpolation="random", re_prob=0.25)`` (timm's
  ImageNet recipe: RandomResizedCropAndInterpolation + flip + RandAugment + ToTensor +
  Normalize + RandomErasing, on PIL images);
- ``timm-eval``: ``create_transform(224, crop_pct=0.95, interpolation="bicubic")``;
- ``tutorial``: torchvision's v1 tutorial recipe (RandomResizedCrop(224) + flip + ToTensor +
  Normalize) on PIL images;
- ``tutorial-eval``: Resize(256) + CenterCrop(224) + ToTensor + Normalize.

Loaders:
- ``wdstool:R``: ``make_loader(shards, transform=R)``;
- ``timm:R``: timm's own loader, ``create_dataset("wds/…", root, split)`` (its webdataset reader
  over our ``_info.json``, written by ``wdstool index --timm``) + ``create_loader`` with the
  same arguments (it builds the same transform), ``use_prefetcher=False``;
- ``webdataset:R``: upstream webdataset, ``.decode("pil")`` + R, ``.batched()`` in the workers;
- ``imagefolder:R``: ``ImageFolder(images, transform=R)`` + ``DataLoader(shuffle=True)``.

timm 1.0.31's increasing posterize asks Pillow for 0 bits at magnitude 10, which Pillow 13
refuses mid-epoch: the baselines run the same copy of the transform the loader runs (Pillow
12's black image there, ``loaders.recipe.timm_ops.with_posterize_fix``), or they would crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

RECIPES = ("timm-train", "timm-eval", "tutorial", "tutorial-eval")


def recipe(name: str, size: int = 224) -> tuple[Any, bool]:
    """(the transform: the preset of that name, posterize fixed for the baselines; is it a
    training recipe)."""
    from loaders.recipe.presets import resolve_transform
    from loaders.recipe.timm_ops import with_posterize_fix

    choice = resolve_transform(name, size)
    return with_posterize_fix(choice.transform), choice.train


def _split(data: Path) -> str:
    """The split name ``wdstool index DATA --timm`` gives the shards folder (written once)."""
    import json
    import subprocess
    import sys

    info = data / "_info.json"
    if not info.exists():
        subprocess.run(
            [sys.executable, "-m", "wdstool", "index", str(data), "--timm"],
            check=True,
            capture_output=True,
        )
    splits = json.loads(info.read_text())["splits"]
    return next(s for s in splits if s == "shards" or s.endswith("shards"))


def build(kind: str, name: str, data: Path, workers: int, batch: int) -> tuple[Any, Any]:
    """The loader ``kind:name`` and a function giving a batch's sample count."""
    tf, train = recipe(name)
    shards = data / "shards"
    if kind == "wdstool":
        from loaders import make_loader

        loader = make_loader(str(shards), batch, transform=tf, num_workers=workers, seed=0)
        return loader, lambda b: len(b["keys"])
    if kind == "timm":
        from timm.data import create_dataset, create_loader

        from loaders.recipe.timm_ops import with_posterize_fix

        split = _split(data)
        ds = create_dataset(
            "wds/bench", root=str(data), split=split, is_training=train, batch_size=batch
        )
        from loaders.recipe.presets import TIMM_EVAL, TIMM_TRAIN

        args = TIMM_TRAIN if name == "timm-train" else TIMM_EVAL
        loader = create_loader(
            ds,
            input_size=(3, 224, 224),
            batch_size=batch,
            is_training=train,
            use_prefetcher=False,
            num_workers=workers,
            **args,
        )
        ds.transform = with_posterize_fix(ds.transform)  # before any worker starts
        return loader, lambda b: len(b[1])
    if kind == "webdataset":
        import webdataset as wds

        from loaders.source import resolve_source

        urls = list(resolve_source(str(shards)).urls)
        ds = (
            wds.WebDataset(
                urls, nodesplitter=wds.split_by_node, shardshuffle=len(urls), empty_check=False
            )
            .shuffle(2000)
            .decode("pil")
            .to_tuple("jpg;png;jpeg;webp", "cls")
            .map_tuple(tf, int)
            .batched(batch, partial=True)
        )
        loader = wds.WebLoader(ds, batch_size=None, num_workers=workers, prefetch_factor=4)
        return loader, lambda b: len(b[1])
    if kind == "imagefolder":
        import torch
        from torchvision import datasets

        ds = datasets.ImageFolder(str(data / "images"), transform=tf)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=batch, shuffle=True, num_workers=workers, prefetch_factor=4
        )
        return loader, lambda b: len(b[1])
    raise SystemExit(f"unknown loader {kind!r}")


__all__ = ["RECIPES", "build", "recipe"]
