"""A torchvision v2 pipeline split where the loader runs each part cheapest.

:func:`split` walks a ``v2.Compose`` (nested ones flattened) and takes its leading geometric
run as the recipe's head, which the decoder executes on the encoded image (only the region is
decoded): after no-op conversions (``ToImage``, ``ToPureTensor``, ``PILToTensor``,
``Identity``, ``RGB``, ``ToDtype(torch.uint8)``), one of

- ``RandomResizedCrop`` (any size, scale, ratio, interpolation, antialias);
- ``Resize`` (shorter side, (h, w) or ``max_size``), optionally followed by ``CenterCrop`` or
  ``RandomCrop`` without padding;
- ``CenterCrop``; ``RandomCrop`` without padding;
- ``RandomChoice`` over such ops of one output size (per-sample interpolation, as timm's
  ``interpolation="random"``: ``RandomChoice([RandomResizedCrop(224, interpolation=BILINEAR),
  RandomResizedCrop(224, interpolation=BICUBIC)])``),

then any ``RandomHorizontalFlip``/``RandomVerticalFlip``. Everything after that is the tail, run
in the workers on the small uint8 crop. Ops are matched by exact type: a subclass may draw its
parameters differently, so it stops the fusion like any other op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode

from loaders.recipe.geometry import (
    ChoiceHead,
    CropHead,
    Head,
    Op,
    RandomResizedCropHead,
    ResizeHead,
    Size,
)
from loaders.recipe.imagetypes import Kind, adapt
from loaders.recipe.parts import Split, flatten

_NO_OPS = (v2.ToImage, v2.ToPureTensor, v2.PILToTensor, v2.Identity, v2.RGB)


def op_name(op: Any) -> str:
    """An op's name for messages: its class's, a function's own, or the ``label`` of the
    loader's own wrappers (the op a conversion stands for, the transforms of a pipeline)."""
    label = getattr(op, "label", None)
    if isinstance(label, str):
        return label
    if isinstance(op, v2.Transform) or not hasattr(op, "__name__"):
        return type(op).__name__
    return op.__name__


def _interpolation(value: Any) -> str:
    if isinstance(value, InterpolationMode):
        return value.value
    if isinstance(value, str):
        return InterpolationMode(value).value
    from torchvision.transforms.functional import _interpolation_modes_from_int

    return _interpolation_modes_from_int(int(value)).value


def _size(value: Any) -> Size:
    return int(value[0]), int(value[-1])


def _is_noop(op: Any) -> bool:
    if type(op) in _NO_OPS:
        return True
    return type(op) is v2.ToDtype and op.dtype == torch.uint8


def _plain_random_crop(op: Any) -> bool:
    return type(op) is v2.RandomCrop and op.padding is None and not op.pad_if_needed


def _geometric(ops: list[Any], i: int) -> tuple[Op | ChoiceHead | None, int]:
    """The fusable geometric op at ``ops[i]`` and how many ops it takes (0: none)."""
    op = ops[i]
    kind = type(op)
    if kind is v2.RandomResizedCrop:
        head = RandomResizedCropHead(
            _size(op.size),
            (float(op.scale[0]), float(op.scale[1])),
            (float(op.ratio[0]), float(op.ratio[1])),
            _interpolation(op.interpolation),
            bool(op.antialias),
        )
        return head, 1
    if kind is v2.Resize:
        resize = None if op.size is None else tuple(int(s) for s in op.size)
        nxt = ops[i + 1] if i + 1 < len(ops) else None
        crop, rand = None, False
        if type(nxt) is v2.CenterCrop:
            crop = _size(nxt.size)
        elif _plain_random_crop(nxt):
            crop, rand = _size(nxt.size), True
        head = ResizeHead(
            resize, op.max_size, _interpolation(op.interpolation), bool(op.antialias), crop, rand
        )
        return head, 1 if crop is None else 2
    if kind is v2.CenterCrop:
        return CropHead(_size(op.size)), 1
    if _plain_random_crop(op):
        return CropHead(_size(op.size), random=True), 1
    if kind is v2.RandomChoice:
        options = []
        for alt in op.transforms:
            parts = list(flatten(alt, v2.Compose))
            found, used = _geometric(parts, 0) if parts else (None, 0)
            if found is None or isinstance(found, ChoiceHead) or used != len(parts):
                return None, 0
            options.append(found)
        sizes = {o.size for o in options}
        if len(sizes) != 1 or None in sizes:
            return None, 0
        return ChoiceHead(tuple(options), tuple(float(p) for p in op.p)), 1
    return None, 0


def split(transform: Callable[[Any], Any]) -> Split:
    """``transform`` cut into the fusable head and the tail (see the module's docstring)."""
    ops = list(flatten(transform, v2.Compose))
    i = 0
    while i < len(ops) and _is_noop(ops[i]):
        i += 1
    if i == len(ops):
        return Split(None, ())
    op, used = _geometric(ops, i)
    if op is None:
        return Split(None, adapt(ops[i:], Kind.TENSOR), op_name(ops[i]))
    i += used
    flips = []
    while i < len(ops) and type(ops[i]) in (v2.RandomHorizontalFlip, v2.RandomVerticalFlip):
        flips.append(("h" if type(ops[i]) is v2.RandomHorizontalFlip else "v", float(ops[i].p)))
        i += 1
    return Split(Head(op, tuple(flips)), adapt(ops[i:], Kind.TENSOR))


__all__ = ["op_name", "split"]
