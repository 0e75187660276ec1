"""What the model sees: the shown samples as ``make_loader`` delivers them, per epoch and recipe.

The samples' image members are written, under their own keys, into a few small shards in a
temporary folder, and ``make_loader`` reads those with the report's seed: a sample's
augmentation is drawn from (seed, epoch, key) and nothing else, so these are the crops, flips
and colour ops this sample gets in epoch 0, 1, ... of a training run with that seed. A key a
tar header cannot hold (non-ASCII, over 100 bytes, unsafe to extract) is replaced by a stand-in
for this, which draws other augmentations than training would (``Views.stand_ins``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from loaders import make_loader
from wdstool.base.errors import WdsToolError
from wdstool.format.manifest import ShardEntry, build_manifest
from wdstool.format.tar_write import END, header, write_member
from wdstool.show.show_config import Column


@dataclass(frozen=True, kw_only=True)
class Views:
    columns: tuple[Column, ...]
    images: tuple[tuple[np.ndarray, ...], ...]  # per sample, per column: uint8 HxWx3
    stand_ins: tuple[int, ...]  # samples whose key had to be replaced (see above)
    rescaled: bool  # a recipe gave floats outside 0..1, stretched per image for display


def model_views(
    samples: Sequence[tuple[str, str, bytes]],
    columns: Sequence[Column],
    *,
    seed: int,
    image_size: int,
    progress: Callable[[int], None] | None = None,
) -> Views:
    """``samples``: (key, image extension, image bytes) each; the images of each column."""
    per_column: list[list[np.ndarray]] = []
    rescaled = False
    with tempfile.TemporaryDirectory(prefix="wdstool-show-") as tmp:
        keys, stand_ins = _write_shards(tmp, samples)
        loaders: dict[tuple[str, bool], Any] = {}
        for col in columns:
            ident = (col.choice.name, col.choice.train)
            if ident not in loaders:
                loaders[ident] = make_loader(
                    tmp,
                    batch_size=min(64, len(samples)),
                    label=None,
                    image_size=image_size,
                    train=col.choice.train,
                    transform=col.choice.transform,
                    shuffle=False,
                    seed=seed,
                    num_workers=0,
                    pin_memory=False,
                    rank=0,
                    world_size=1,
                )
            images, stretched = _epoch(loaders[ident], col.epoch, seed, keys, progress)
            per_column.append(images)
            rescaled = rescaled or stretched
    return Views(
        columns=tuple(columns),
        images=tuple(zip(*per_column, strict=True)) if per_column else (),
        stand_ins=tuple(stand_ins),
        rescaled=rescaled,
    )


def _write_shards(
    folder: str, samples: Sequence[tuple[str, str, bytes]]
) -> tuple[list[str], list[int]]:
    """Write ``samples`` in order into shards with a manifest; a new shard wherever a key
    repeats the one before it (one sample to the tar reader). Returns the keys written."""
    keys: list[str] = []
    stand_ins: list[int] = []
    groups: list[list[int]] = []
    for i, (key, ext, _data) in enumerate(samples):
        try:
            header(f"{key}.{ext}", 0)  # refuses what a plain ustar header cannot hold
            use = key
        except ValueError:
            use = f"wdstool-show-{i:06d}"
            stand_ins.append(i)
        if not groups or (keys and keys[-1] == use):
            groups.append([])
        groups[-1].append(i)
        keys.append(use)
    entries = []
    for n, group in enumerate(groups):
        name = f"show-{n:06d}.tar"
        with open(os.path.join(folder, name), "wb") as f:
            size = sum(
                write_member(f.write, f"{keys[i]}.{samples[i][1]}", samples[i][2]) for i in group
            )
            f.write(END)
        entries.append(ShardEntry(name, len(group), size + len(END), ""))
    manifest = build_manifest(entries, classes=(), fingerprint="", options={}, skipped=())
    with open(os.path.join(folder, "index.json"), "wb") as f:
        f.write(manifest.dumps())
    return keys, stand_ins


def _epoch(
    loader: Any, epoch: int, seed: int, keys: list[str], progress: Callable[[int], None] | None
) -> tuple[list[np.ndarray], bool]:
    loader.set_epoch(epoch)
    images: list[np.ndarray] = []
    got: list[str] = []
    stretched = False
    # a transform drawing from torch's global generator gets a fixed one, and leaves the
    # caller's alone
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1_000_003 + epoch)
        for batch in loader:
            got.extend(batch["keys"])
            for img in batch["pixel_values"]:
                array, s = displayable(img)
                images.append(array)
                stretched = stretched or s
            if progress is not None:
                progress(len(batch["keys"]))
    if got != keys:
        raise WdsToolError(
            f"the loader delivered {len(got)} samples in another order than written "
            f"({got[:3]} ... against {keys[:3]} ...); please report this"
        )
    return images, stretched


def displayable(img: torch.Tensor) -> tuple[np.ndarray, bool]:
    """An image tensor as a transform leaves it ([C,H,W] uint8 or float, C = 1 or 3) as uint8
    H x W x 3 for a browser, and whether it had to be stretched (floats outside 0..1)."""
    t = img.detach().cpu()
    if t.dim() == 2:
        t = t.unsqueeze(0)
    if t.dim() != 3 or t.shape[0] not in (1, 3):
        raise WdsToolError(f"a recipe gave an image of shape {tuple(img.shape)}; want [3,H,W]")
    if t.shape[0] == 1:
        t = t.expand(3, -1, -1)
    stretched = False
    if t.dtype != torch.uint8:
        t = t.float()
        lo, hi = float(t.min()), float(t.max())
        if lo < 0 or hi > 1:
            t = (t - lo) / max(hi - lo, 1e-12)
            stretched = True
        t = (t * 255).round().clamp(0, 255).to(torch.uint8)
    return np.ascontiguousarray(t.permute(1, 2, 0).numpy()), stretched
