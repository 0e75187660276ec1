"""Named training and evaluation recipes, each written in the library people write it with.

What ``wdstool stream-bench --transform NAME``, ``wdstool show --transform NAME`` and
``examples/train_ddp.py --recipe NAME`` measure, show and train with: the recipes people train
with (torchvision's references and v1 tutorial, timm's ImageNet recipe, open_clip), each built
for an output size. ``--transform module:attr`` names a pipeline of one's own instead.
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


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# timm's ImageNet training recipe (DeiT's, and timm's train.py defaults for ViTs), and its eval
TIMM_TRAIN = dict(auto_augment="rand-m9-mstd0.5-inc1", interpolation="random", re_prob=0.25)
TIMM_EVAL = dict(crop_pct=0.95, interpolation="bicubic")


def _timm(size: int, train: bool, **kw: Any) -> Any:
    try:
        from timm.data import create_transform
    except ImportError as exc:
        raise ConfigError(
            f"this preset is timm's create_transform: pip install timm ({exc})"
        ) from None
    return create_transform(
        size, is_training=train, **{**(TIMM_TRAIN if train else TIMM_EVAL), **kw}
    )


def _tutorial(size: int) -> Any:
    from torchvision import transforms as T

    return T.Compose(
        [T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]
    )


def _tutorial_eval(size: int) -> Any:
    from torchvision import transforms as T

    return T.Compose(
        [T.Resize(int(size / 0.875)), T.CenterCrop(size), T.ToTensor(), T.Normalize(MEAN, STD)]
    )


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
        "RRC bicubic + flip + torchvision's RandAugment(2, 9) + RandomErasing(0.25) on uint8 "
        "(close to DeiT's; timm's own is timm-train)",
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
    "timm-train": (
        "timm's create_transform(S, is_training=True, auto_augment='rand-m9-mstd0.5-inc1', "
        "interpolation='random', re_prob=0.25): float batches",
        lambda s: _timm(s, True),
        True,
    ),
    "timm-eval": (
        "timm's create_transform(S, crop_pct=0.95, interpolation='bicubic'): float batches",
        lambda s: _timm(s, False),
        False,
    ),
    "tutorial": (
        "torchvision v1's tutorial recipe: RandomResizedCrop + flip + ToTensor + Normalize "
        "on PIL images: float batches",
        _tutorial,
        True,
    ),
    "tutorial-eval": (
        "torchvision v1: Resize(S/0.875) + CenterCrop(S) + ToTensor + Normalize: float batches",
        _tutorial_eval,
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
