"""timm's transforms (what ``timm.data.create_transform`` returns), fused as timm runs them.

A timm pipeline is a torchvision v1 ``Compose`` over PIL images (``loaders.recipe.tv1`` splits
it): its head here is ``RandomResizedCropAndInterpolation`` (timm's ``get_params`` on Python's
``random``, then ``random.choice`` of bilinear/bicubic for ``interpolation="random"``, then
``F.resized_crop``: PIL's resampling of the region) or ``ResizeKeepRatio`` (+ ``CenterCrop``),
then v1's flips (torch's generator); the tail is timm's own ops (RandAugment/AutoAugment/AugMix
on the PIL crop — op choice from numpy, magnitudes from Python's ``random``; ``MaybeToTensor``,
``Normalize``, ``RandomErasing`` on the normalized tensor — box from ``random``, fill from
torch). The three generators are seeded per sample, so with the head's draws made by timm's
own functions, in timm's order, a sample's pixels are those of timm's pipeline on the whole
decoded image seeded the same way.

Pillow 13 refuses ``ImageOps.posterize(img, 0)``, which timm's posterize ops pass at the ends
of their range (``PosterizeIncreasing`` at magnitude 10 — reached by ``rand-m9-mstd0.5-inc1``'s
magnitude noise —, ``Posterize`` below 2.5): the loader's copy of the pipeline runs Pillow 12's
result for 0 bits instead (every level zero: a black image), which is what timm's recipes were
trained with and what TensorFlow's posterize gives; said once in the log.
"""

from __future__ import annotations

import copy
import functools
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from PIL import Image, ImageOps
from timm.data import auto_augment as aa
from timm.data import transforms as tt
from torchvision import transforms as T

from loaders.recipe.geometry import Geometry, Size
from loaders.recipe.imagetypes import (
    PIL_ONLY,
    TO_FLOAT,
    TO_UINT8,
    Kind,
    Rule,
    register,
)
from loaders.recipe.libhead import LibOp, mode, stand_in
from loaders.recipe.parts import Split, flatten
from loaders.recipe.tv1 import as_hw, crop_on, with_crop
from loaders.recipe.tv1 import split as split_v1

TIMM = "timm"
log = logging.getLogger(__name__)


class _ToDtype:
    """timm's ``ToTensor(dtype)`` (``pil_to_tensor(img).to(dtype)``) given a uint8 tensor."""

    draws_nothing = True

    def __init__(self, op: Any) -> None:
        self.dtype = op.dtype

    def __call__(self, img: Any) -> Any:
        return img.to(self.dtype)

    label = "ToTensor"

    def __repr__(self) -> str:
        return f"ToTensor(dtype={self.dtype})"


register([tt.MaybeToTensor], TO_FLOAT)
register([tt.MaybePILToTensor, tt.ToNumpy], TO_UINT8)
register([tt.ToTensor], Rule(Kind.PIL, Kind.TENSOR, _ToDtype))
register(
    [aa.RandAugment, aa.AutoAugment, aa.AugMixAugment, tt.RandomResizedCropAndInterpolation],
    PIL_ONLY,
)
register([tt.ResizeKeepRatio], PIL_ONLY)


def _choose(interpolation: Any) -> str:
    """timm's interpolation for one sample: ``random.choice`` of a tuple ("random")."""
    if isinstance(interpolation, tuple | list):
        interpolation = random.choice(interpolation)
    return mode(interpolation)


@dataclass(frozen=True)
class ResizedCrop:
    """``RandomResizedCropAndInterpolation``: timm's ``get_params`` (Python's ``random``), the
    interpolation chosen, ``F.resized_crop``."""

    op: Any

    @property
    def size(self) -> Size:
        return int(self.op.size[0]), int(self.op.size[1])

    def draw(self, height: int, width: int) -> Geometry:
        op = self.op
        top, left, h, w = op.get_params(stand_in(height, width), op.scale, op.ratio)
        interpolation = _choose(op.interpolation)
        return Geometry((height, width), top, left, h, w, self.size, interpolation)

    def describe(self) -> str:
        return repr(self.op)


@dataclass(frozen=True)
class ResizeKeepRatio:
    """``ResizeKeepRatio`` (timm's eval resize for (h, w) sizes, and its random scale/aspect
    variant), optionally + ``CenterCrop``/``RandomCrop``."""

    op: Any
    crop: Any = None

    @property
    def size(self) -> Size | None:
        return None if self.crop is None else as_hw(self.crop.size)

    def draw(self, height: int, width: int) -> Geometry:
        op = self.op
        rh, rw = op.get_params(
            stand_in(height, width),
            op.size,
            op.longest,
            op.random_scale_prob,
            op.random_scale_range,
            op.random_scale_area,
            op.random_aspect_prob,
            op.random_aspect_range,
        )
        interpolation = _choose(op.interpolation)
        top, left, h, w, pad = (0, 0, rh, rw, False)
        if self.crop is not None:
            top, left, h, w, pad = crop_on(rh, rw, self.crop)
        return Geometry(
            (height, width), top, left, h, w, (h, w), interpolation, resized=(rh, rw), pad=pad
        )

    def describe(self) -> str:
        text = f"ResizeKeepRatio({self.op.size}, longest={self.op.longest:g})"
        return text if self.crop is None else f"{text} + {type(self.crop).__name__}"


def match(ops: list[Any], i: int) -> tuple[LibOp | None, int]:
    """timm's fusable geometric op at ``ops[i]`` (0: none)."""
    op, kind = ops[i], type(ops[i])
    if kind is tt.RandomResizedCropAndInterpolation:
        return ResizedCrop(op), 1
    if kind is tt.ResizeKeepRatio:
        return with_crop(ops, i, ResizeKeepRatio)
    return None, 0


# --- posterize at 0 bits under Pillow 13 ---------------------------------------------------


@functools.cache
def pillow_refuses_zero_bits() -> bool:
    try:
        ImageOps.posterize(Image.new("RGB", (1, 1)), 0)
    except ValueError:
        return True
    return False


def posterize(img: Image.Image, bits_to_keep: int, **kw: Any) -> Image.Image:
    """timm's ``posterize``, with Pillow 12's result for 0 bits (no bit kept: black)."""
    if bits_to_keep <= 0:
        return img.point([0] * (256 * len(img.getbands())))
    return aa.posterize(img, bits_to_keep, **kw)


def _augment_ops(transform: Any) -> Iterator[Any]:
    """Every timm ``AugmentOp`` inside ``transform``'s auto-augment ops."""
    for op in flatten(transform, T.Compose):
        if isinstance(op, aa.RandAugment | aa.AugMixAugment):
            yield from op.ops
        elif isinstance(op, aa.AutoAugment):
            for sub in op.policy:
                yield from sub


def with_posterize_fix(transform: Any) -> Any:
    """``transform``, or a copy of it whose posterize ops take 0 bits as Pillow 12 did, where
    this Pillow refuses them (the user's own objects are left alone)."""
    if not pillow_refuses_zero_bits() or not any(
        op.aug_fn is aa.posterize for op in _augment_ops(transform)
    ):
        return transform
    transform = copy.deepcopy(transform)
    for op in _augment_ops(transform):
        if op.aug_fn is aa.posterize:
            op.aug_fn = posterize
    log.info(
        "timm posterize: this Pillow refuses 0 bits, which timm's posterize ops reach at the "
        "ends of their range; the loader runs Pillow 12's result there (a black image), as "
        "timm's recipes were trained"
    )
    return transform


def split(transform: Any) -> Split:
    """A timm pipeline cut into its fused head and timm's own tail (see the module)."""
    return split_v1(with_posterize_fix(transform), TIMM, (match,))


__all__ = ["TIMM", "match", "posterize", "split", "with_posterize_fix"]
