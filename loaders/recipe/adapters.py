"""Which library wrote a pipeline, and that library's adapter.

A ``transform`` is split by the adapter of the library it comes from, each with that library's
own draws, generators, image type and resampling (DESIGN.md, "Where the new pieces live"):

- torchvision v2 (``v2.Compose``, a v2 op, or any other callable): ``loaders.recipe.fuse``;
- torchvision v1 (``transforms.Compose`` of v1 ops): ``loaders.recipe.tv1``;
- timm (a v1 ``Compose`` holding timm's ops, what ``timm.data.create_transform`` returns):
  ``loaders.recipe.timm_ops``;
- albumentations (``A.Compose``): ``loaders.recipe.albu``.

Batch-level ops (MixUp, CutMix) need a batch of images and labels: in ``transform`` they are a
ConfigError that says where they go.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torchvision import transforms as T
from torchvision.transforms import v2

from loaders.recipe.parts import Split
from wdstool.base.errors import ConfigError

_CONTAINERS = (T.Compose, T.RandomApply, T.RandomChoice, T.RandomOrder, v2.Compose)
_CONTAINERS_V2 = (v2.RandomApply, v2.RandomChoice, v2.RandomOrder)


def _module(op: Any) -> str:
    return type(op).__module__ or ""


def walk(transform: Any) -> Iterator[Any]:
    """Every op inside ``transform``, containers opened (Compose, RandomApply, RandomChoice,
    RandomOrder of either torchvision API, albumentations' compositions)."""
    yield transform
    inner = getattr(transform, "transforms", None)
    if isinstance(transform, _CONTAINERS + _CONTAINERS_V2) or (
        _module(transform).startswith("albumentations") and isinstance(inner, list | tuple)
    ):
        for op in inner or ():
            yield from walk(op)


def library(transform: Any) -> str:
    """ "albumentations", "timm", "torchvision v1" or "torchvision v2" (also for any other
    callable: the v2 adapter runs what it does not know as an opaque tail)."""
    mod = _module(transform)
    if mod.startswith("albumentations"):
        return "albumentations"
    if type(transform) is T.Compose or mod.startswith(
        ("timm.", "torchvision.transforms.transforms")
    ):
        if any(_module(op).startswith("timm.") for op in walk(transform)):
            return "timm"
        return "torchvision v1"
    return "torchvision v2"


def _batch_op(op: Any) -> str | None:
    """The name of a batch-level op (it mixes samples), or None."""
    if isinstance(op, v2.MixUp | v2.CutMix):
        return f"v2.{type(op).__name__}"
    if _module(op).startswith("timm.data.mixup"):
        return f"timm's {type(op).__name__}"
    return None


def check_sample_ops(transform: Any) -> None:
    """ConfigError for a batch-level op inside a per-sample ``transform``."""
    for op in walk(transform):
        name = _batch_op(op)
        if name is not None:
            raise ConfigError(
                f"transform: {name} mixes the samples of a batch (images and labels together) "
                "and cannot run on one sample; apply it to the batch after it reaches the "
                "device: x, y = mixup(batch['pixel_values'].to(device), "
                "batch['labels'].to(device)) (docs/guides/migrating.md)"
            )


def split(transform: Callable[[Any], Any]) -> Split:
    """``transform`` split by its library's adapter (see the module's docstring)."""
    check_sample_ops(transform)
    lib = library(transform)
    if lib == "albumentations":
        from loaders.recipe import albu

        return albu.split(transform)
    if lib == "timm":
        from loaders.recipe import timm_ops

        return timm_ops.split(transform)
    if lib == "torchvision v1":
        from loaders.recipe import tv1

        return tv1.split(transform)
    from loaders.recipe import fuse

    return fuse.split(transform)


__all__ = ["check_sample_ops", "library", "split", "walk"]
