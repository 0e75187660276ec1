"""Named training and evaluation recipes, written as torchvision v2 pipelines.

What ``wdstool stream-bench --transform NAME`` and ``wdstool show --transform NAME`` measure and
show: the recipes people train with (timm, DeiT, torchvision's references, open_clip), each
built for an output size. ``--transform module:attr`` names a pipeline of one's own instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wdstool.base.errors import ConfigError


@dataclass(frozen=True)
class Choice:
    """What a ``--transform`` value names: a pipeline (``None``: the built-in recipe) and
    whether the built-in recipe is the train one (``train=False``: the eval one)."""

    name: str
    transform: Callable[[Any], Any] | None
    train: bool = True


def _v2() -> Any:
    from torchvision.transforms import v2

    return v2


def _bicubic(size: int, *, scale: tuple[float, float] = (0.08, 1.0), flip: bool = True) -> list:
    v2 = _v2()
    ops: list = [
        v2.RandomResizedCrop(
            size, scale=scale, interpolation=v2.InterpolationMode.BICUBIC, antialias=True
        )
    ]
    if flip:
        ops.append(v2.RandomHorizontalFlip())
    return ops


def _randaug(size: int) -> Any:
    v2 = _v2()
    return v2.Compose(
        [
            *_bicubic(size),
            v2.RandAugment(num_ops=2, magnitude=9),
            v2.RandomErasing(p=0.25),
        ]
    )


def _trivialaug(size: int) -> Any:
    v2 = _v2()
    return v2.Compose([*_bicubic(size), v2.TrivialAugmentWide(), v2.RandomErasing(p=0.25)])


def _eval_bicubic(size: int, crop_pct: float = 0.95) -> Any:
    v2 = _v2()
    return v2.Compose(
        [
            v2.Resize(int(size / crop_pct), interpolation=v2.InterpolationMode.BICUBIC),
            v2.CenterCrop(size),
        ]
    )


# name -> (what it is, factory(image_size) -> pipeline or None for the built-in recipe, train)
PRESETS: dict[str, tuple[str, Callable[[int], Any] | None, bool]] = {
    "default": ("the built-in train recipe: RandomResizedCrop bilinear + flip", None, True),
    "eval": ("the built-in eval recipe: Resize(S/0.875) bilinear + CenterCrop(S)", None, False),
    "bicubic": (
        "RandomResizedCrop bicubic + flip (DeiT/timm geometry)",
        lambda s: _v2().Compose(_bicubic(s)),
        True,
    ),
    "randaug": (
        "RRC bicubic + flip + RandAugment(2, 9) + RandomErasing(0.25) (DeiT)",
        _randaug,
        True,
    ),
    "trivialaug": (
        "RRC bicubic + flip + TrivialAugmentWide + RandomErasing(0.25) (torchvision ta_wide)",
        _trivialaug,
        True,
    ),
    "clip": (
        "RandomResizedCrop scale 0.9-1 bicubic, no flip (open_clip)",
        lambda s: _v2().Compose(_bicubic(s, scale=(0.9, 1.0), flip=False)),
        True,
    ),
    "eval-bicubic": (
        "Resize(S/0.95) bicubic + CenterCrop(S) (timm eval at crop_pct 0.95)",
        _eval_bicubic,
        False,
    ),
}


def resolve_transform(spec: str, image_size: int) -> Choice:
    """A preset name (``PRESETS``) or ``module:attr`` (an importable pipeline object) -> the
    pipeline to pass as ``make_loader(transform=...)``; ConfigError naming the choices."""
    if spec in PRESETS:
        _what, factory, train = PRESETS[spec]
        return Choice(spec, None if factory is None else factory(image_size), train)
    if ":" not in spec:
        names = ", ".join(PRESETS)
        raise ConfigError(f"transform={spec!r}: not a preset ({names}) nor module:attr")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"transform={spec!r}: cannot import {module_name!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"transform={spec!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"transform={spec!r}: {type(obj).__name__} is not callable")
    return Choice(spec, obj, True)


__all__ = ["PRESETS", "Choice", "resolve_transform"]
