"""torchvision v1 pipelines (``torchvision.transforms.Compose``), and timm's, which are v1 pipelines.

:func:`split` takes the pipeline's leading geometric run as a :class:`LibHead` — after leading
``PILToTensor`` conversions, one of

- ``RandomResizedCrop`` (any size, scale, ratio, interpolation, antialias);
- ``Resize`` (shorter side, (h, w) or ``max_size``), optionally + ``CenterCrop`` or
  ``RandomCrop`` without padding;
- ``CenterCrop``; ``RandomCrop`` without padding;
- timm's ``RandomResizedCropAndInterpolation`` and ``ResizeKeepRatio`` (+ ``CenterCrop``)
  (``loaders.recipe.timm_ops``),

then any ``RandomHorizontalFlip``/``RandomVerticalFlip`` — each drawn by the op's own parameter
function (torch's generator for v1, Python's ``random`` for timm) — and the rest as the tail.
The image type is the pipeline's: PIL images where an op needs one (``ToTensor``, timm's ops),
uint8 tensors otherwise (``loaders.recipe.imagetypes``); v1's pixels differ between the two
(PIL's resampling, or torch's through float32), and the head computes whichever the pipeline
computes. Ops are matched by exact type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchvision import transforms as T

from loaders.recipe.geometry import Geometry, Size, center_offset, resized_size
from loaders.recipe.imagetypes import TO_UINT8, Kind, adapt, needs_pil, rule
from loaders.recipe.libhead import LibHead, LibOp, mode, stand_in
from loaders.recipe.parts import Split, flatten

V1 = "torchvision v1"


def as_hw(value: Any) -> Size:
    """An op's size (an int, [s] or (h, w)) as (h, w)."""
    if isinstance(value, int):
        return value, value
    return int(value[0]), int(value[-1])


@dataclass(frozen=True)
class ResizedCrop:
    """``transforms.RandomResizedCrop``: ``get_params`` (torch's generator), then
    ``F.resized_crop``."""

    op: Any

    @property
    def size(self) -> Size:
        return as_hw(self.op.size)

    def draw(self, height: int, width: int) -> Geometry:
        op = self.op
        top, left, h, w = T.RandomResizedCrop.get_params(
            stand_in(height, width), op.scale, op.ratio
        )
        return Geometry(
            (height, width), top, left, h, w, self.size, mode(op.interpolation), bool(op.antialias)
        )

    def describe(self) -> str:
        return f"RandomResizedCrop({self.size[0]}x{self.size[1]}, {mode(self.op.interpolation)})"


def crop_on(height: int, width: int, crop: Any) -> tuple[int, int, int, int, bool]:
    """(top, left, h, w, pad) of a ``CenterCrop`` or a ``RandomCrop`` without padding
    (``get_params``: torch's generator) on a ``height`` x ``width`` image."""
    ch, cw = as_hw(crop.size)
    if type(crop) is T.RandomCrop:
        top, left, ch, cw = T.RandomCrop.get_params(stand_in(height, width), (ch, cw))
        return top, left, ch, cw, False
    if ch > height or cw > width:  # F.center_crop pads with zeros
        return 0, 0, ch, cw, True
    return center_offset(height, ch), center_offset(width, cw), ch, cw, False


@dataclass(frozen=True)
class Crop:
    """``CenterCrop`` or ``RandomCrop`` without padding, alone: a region at its own size."""

    op: Any

    @property
    def size(self) -> Size:
        return as_hw(self.op.size)

    def draw(self, height: int, width: int) -> Geometry:
        top, left, h, w, pad = crop_on(height, width, self.op)
        return Geometry((height, width), top, left, h, w, (h, w), "bilinear", pad=pad)

    def describe(self) -> str:
        return f"{type(self.op).__name__}({self.size[0]}x{self.size[1]})"


@dataclass(frozen=True)
class ResizeThenCrop:
    """``Resize`` of the whole image, optionally + ``CenterCrop``/``RandomCrop``."""

    op: Any
    crop: Any = None

    @property
    def size(self) -> Size | None:
        if self.crop is not None:
            return as_hw(self.crop.size)
        s = self.op.size
        return (int(s[0]), int(s[1])) if isinstance(s, list | tuple) and len(s) == 2 else None

    def draw(self, height: int, width: int) -> Geometry:
        op = self.op
        size = [op.size] if isinstance(op.size, int) else op.size
        rh, rw = resized_size(height, width, None if size is None else list(size), op.max_size)
        top, left, h, w, pad = (0, 0, rh, rw, False)
        if self.crop is not None:
            top, left, h, w, pad = crop_on(rh, rw, self.crop)
        return Geometry(
            (height, width),
            top,
            left,
            h,
            w,
            (h, w),
            mode(op.interpolation),
            bool(op.antialias) if op.antialias is not None else True,
            resized=(rh, rw),
            pad=pad,
        )

    def describe(self) -> str:
        text = f"Resize({self.op.size}, {mode(self.op.interpolation)})"
        return text if self.crop is None else f"{text} + {type(self.crop).__name__}"


def plain_crop(op: Any) -> bool:
    """``CenterCrop``, or ``RandomCrop`` without padding."""
    if type(op) is T.CenterCrop:
        return True
    return type(op) is T.RandomCrop and op.padding is None and not op.pad_if_needed


def with_crop(ops: list[Any], i: int, make: Any) -> tuple[LibOp, int]:
    """``make(ops[i], crop)`` and 2 when a plain crop follows the resize at ``ops[i]``, else
    ``make(ops[i])`` and 1: a resize and its crop are one region of the source."""
    nxt = ops[i + 1] if i + 1 < len(ops) else None
    if nxt is not None and plain_crop(nxt):
        return make(ops[i], nxt), 2
    return make(ops[i]), 1


def match(ops: list[Any], i: int) -> tuple[LibOp | None, int]:
    """The fusable v1 geometric op at ``ops[i]`` and how many ops it takes (0: none)."""
    op, kind = ops[i], type(ops[i])
    if kind is T.RandomResizedCrop:
        return ResizedCrop(op), 1
    if kind is T.Resize:
        return with_crop(ops, i, ResizeThenCrop)
    if plain_crop(op):
        return Crop(op), 1
    return None, 0


FLIPS = {T.RandomHorizontalFlip: "h", T.RandomVerticalFlip: "v"}
Matcher = Callable[[list[Any], int], tuple[LibOp | None, int]]


def split(transform: Callable[[Any], Any], library: str = V1, matchers: tuple = ()) -> Split:
    """A v1 (or timm) pipeline cut into a :class:`LibHead` and the tail (see the module's
    docstring); ``matchers``: another library's fusable ops (timm's), tried before v1's."""
    ops = list(flatten(transform, T.Compose))
    kind = Kind.PIL if needs_pil(ops) else Kind.TENSOR
    i = 0
    while i < len(ops) and rule(ops[i]) is TO_UINT8:  # PILToTensor first: tensors from here
        i, kind = i + 1, Kind.TENSOR
    if i == len(ops):
        return Split(None, (), kind=kind, library=library)
    found: LibOp | None = None
    for m in (*matchers, match):
        found, used = m(ops, i)
        if found is not None:
            break
    if found is None:
        return Split(None, adapt(ops, kind), type(ops[i]).__name__, kind=kind, library=library)
    i += used
    flips = []
    while i < len(ops) and type(ops[i]) in FLIPS:
        flips.append((FLIPS[type(ops[i])], ops[i]))
        i += 1
    tail = ops[i:]
    hands = Kind.TENSOR if kind is Kind.TENSOR or converts_first(tail) else Kind.PIL
    head = LibHead(found, tuple(flips), kind, library, hands)
    return Split(head, adapt(tail, hands), kind=kind, library=library)


def converts_first(ops: list[Any]) -> bool:
    """The first op turns a PIL image into a tensor and has a tensor form with the same result
    (``ToTensor``, ``PILToTensor``, timm's ``MaybeToTensor``...), or there is none: a PIL
    head can hand over a tensor of its pixels (every later op sees what it saw before)."""
    return not ops or (rule(ops[0]).makes is Kind.TENSOR and rule(ops[0]).on_tensor is not None)


__all__ = ["V1", "as_hw", "crop_on", "match", "plain_crop", "split", "with_crop"]
