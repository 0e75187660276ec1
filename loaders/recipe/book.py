"""The recipes of one loader: per epoch (a size schedule) and per view (multi-crop).

:class:`Recipes` is what ``make_loader`` keeps of ``transform``, ``image_size`` and ``views``:
``at(epoch)`` gives the recipes a worker runs that epoch, one per view (one without views);
``largest()`` the output sizes the batch buffers are sized for, once.

- A size schedule (``image_size`` a mapping or a callable, ``loaders.recipe.schedule``)
  replaces the output size of the fused crop each epoch: the built-in recipes at that size, or
  ``transform``'s head with its size replaced (``Recipe.at_size``); a pipeline whose later ops
  depend on the size is given as ``per_size(factory)``, ``factory(size) -> pipeline``.
- ``views=[(transform, count), ...]``: every sample yields ``sum(count)`` crops, the views in
  the given order, each its own recipe (DINO: ``[(global_crop, 2), (local_crop, 8)]``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from loaders.recipe.fuse import op_name
from loaders.recipe.imagetypes import Kind
from loaders.recipe.recipe import Recipe, build_recipe
from loaders.recipe.schedule import Size, as_schedule
from wdstool.base.errors import ConfigError

ViewsArg = Sequence[tuple[Any, int]]


@dataclass(frozen=True)
class PerSize:
    """``transform=per_size(factory)``: the pipeline built anew for each size of a schedule
    (for ops after the crop that depend on the size). ``factory`` must be picklable."""

    factory: Callable[[Size], Any]


def per_size(factory: Callable[[Size], Any]) -> PerSize:
    """Mark ``factory(size) -> pipeline`` as a transform that depends on the epoch's size."""
    if not callable(factory):
        raise ConfigError(f"per_size({factory!r}): give a callable size -> pipeline")
    return PerSize(factory)


class Recipes:
    """The recipes of a loader (see the module's docstring)."""

    def __init__(
        self,
        transform: Any,
        *,
        train: bool = True,
        image_size: Any = None,
        output: str = "auto",
        views: ViewsArg | None = None,
    ) -> None:
        self.transform, self.train, self.output = transform, train, output
        self.schedule = as_schedule(image_size)
        fixed = None if self.schedule is not None else image_size
        self.views: tuple[Recipe, ...] | None = None
        if views is not None:
            self.views = self._views(views, transform, output)
        if isinstance(transform, PerSize) and self.schedule is None and fixed is None:
            raise ConfigError("transform=per_size(...) needs image_size (a size or a schedule)")
        first = self.schedule(0) if self.schedule is not None else fixed
        self._cache: dict[Any, Recipe] = {}
        self.base = self._build(first)
        if output == "auto":  # the pipeline's: float where it normalizes, else uint8
            self.output = "float" if self.base.dtype == torch.float32 else "uint8"
        if output == "encoded":
            self._check_encoded()

    def _check_encoded(self) -> None:
        """output="encoded" decodes on the device: one geometric recipe, no pixel ops."""
        if self.views is not None:
            raise ConfigError("output='encoded' takes one recipe; views need output='uint8'")
        if self.base.library != "torchvision v2" or self.base.kind is not Kind.TENSOR:
            raise ConfigError(
                f"output='encoded' decodes on the device with torchvision v2's ops; this "
                f"{self.base.library} pipeline computes its pixels its own way "
                f"({self.base.describe()}): use output='uint8' or 'auto'"
            )
        if self.base.tail or not self.base.fused:
            what = ", ".join(op_name(op) for op in self.base.tail)
            raise ConfigError(
                f"output='encoded' decodes on the device and takes a geometric pipeline only; "
                f"{what} would need decoded pixels in the workers: apply it after "
                "loaders.DeviceDecoder, or use output='uint8'"
            )

    def _views(self, views: ViewsArg, transform: Any, output: str) -> tuple[Recipe, ...]:
        if transform is not None:
            raise ConfigError("give transform or views, not both (each view has its transform)")
        if self.schedule is not None:
            raise ConfigError("views take no size schedule: each view's pipeline sets its size")
        if output not in ("uint8", "auto"):
            raise ConfigError(
                f"views are uint8 batches (output={output!r}): normalize them on the device"
            )
        out: list[Recipe] = []
        for item in views:
            if not (isinstance(item, tuple | list) and len(item) == 2):
                raise ConfigError(f"views: {item!r} is not a (transform, count) pair")
            tf, count = item
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ConfigError(f"views: count {count!r} must be an int >= 1")
            out.extend([build_recipe(tf, output=output)] * count)
        if not out:
            raise ConfigError("views=[]: give at least one (transform, count)")
        return tuple(out)

    @cached_property
    def _unsized(self) -> Recipe:
        """The scheduled pipeline split and probed once; each size is set on it (at_size)."""
        return build_recipe(self.transform, output=self.output)

    def _build(self, size: Any) -> Recipe:
        key = None if size is None else tuple(size) if not isinstance(size, int) else size
        if key in self._cache:
            return self._cache[key]
        tf = self.transform
        if isinstance(tf, PerSize):
            recipe = build_recipe(tf.factory(size), output=self.output)
        elif tf is None or self.schedule is None:
            recipe = build_recipe(tf, train=self.train, image_size=size, output=self.output)
        else:
            recipe = self._unsized.at_size(size, self.output)
        self._cache[key] = recipe
        return recipe

    def at(self, epoch: int) -> tuple[Recipe, ...]:
        """The recipes of ``epoch``: one per view, or the one recipe."""
        if self.views is not None:
            return self.views
        if self.schedule is None:
            return (self.base,)
        return (self._build(self.schedule(epoch)),)

    def largest(self) -> list[Size | None]:
        """Per view, the largest output size over the epochs (None: unknown, not pooled)."""
        if self.views is not None:
            return [r.size for r in self.views]
        if self.schedule is None:
            return [self.base.size]
        return [self._build(self.schedule.largest).size]

    def __str__(self) -> str:
        if self.views is not None:
            return "; ".join(f"view {i}: {r}" for i, r in enumerate(self.views))
        text = str(self.base)
        return text if self.schedule is None else f"{text} (size per epoch: {self.schedule})"


__all__ = ["PerSize", "Recipes", "per_size"]
