"""Output size per epoch: progressive resolution.

``make_loader(image_size=...)`` takes a fixed size (an int or (h, w)), or a schedule: a mapping
``{epoch: size}`` (a step function: from that epoch on, the size of the largest key at or below
the epoch; epochs before the first key take the first size) or a picklable callable
``epoch -> size``. :func:`linear_ramp` is FFCV's ImageNet schedule (``get_resolution``: min_res
until start_ramp, a linear ramp rounded to a multiple of 32 up to max_res at end_ramp).

The size of an epoch is fixed when the epoch starts (``set_epoch``); it replaces the output size
of the recipe's fused crop. The batch buffers are sized once for the largest size: a mapping's
largest value, a :class:`Ramp`'s ``max_res``, a plain callable's largest over
``HORIZON`` epochs (an epoch past that asking for more is a one-line error).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wdstool.base.errors import ConfigError

Size = tuple[int, int]
# what make_loader(image_size=...) takes: a size, {epoch: size}, or epoch -> size
SizeArg = int | tuple[int, int] | Mapping[int, Any] | Callable[[int], Any]
HORIZON = 1000  # epochs a plain callable is evaluated over to size the batch buffers


def as_size(value: Any, where: str = "image_size") -> Size:
    """An output size as (height, width), an int being square; at least 8 pixels a side.
    ``where`` names the setting in the one-line ConfigError for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = (value, value)
    elif (
        isinstance(value, tuple | list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        size = (int(value[0]), int(value[1]))
    else:
        raise ConfigError(f"{where}: {value!r} is not a size (an int or an (h, w) pair)")
    if min(size) < 8:
        raise ConfigError(f"{where}: size {value!r} is below 8 pixels")
    return size


@dataclass(frozen=True)
class Ramp:
    """FFCV's progressive resolution: ``min_res`` up to ``start_ramp``, then linear to
    ``max_res`` at ``end_ramp`` (and after), rounded to a multiple of ``multiple``."""

    min_res: int
    max_res: int
    end_ramp: int
    start_ramp: int = 0
    multiple: int = 32

    def __post_init__(self) -> None:
        if not 8 <= self.min_res <= self.max_res or self.multiple < 1:
            raise ConfigError(
                f"linear_ramp: need 8 <= min_res <= max_res and multiple >= 1, got {self}"
            )
        if self.end_ramp <= self.start_ramp:
            raise ConfigError(f"linear_ramp: end_ramp must be after start_ramp, got {self}")

    def __call__(self, epoch: int) -> int:
        if epoch <= self.start_ramp:
            return self.min_res
        if epoch >= self.end_ramp:
            return self.max_res
        frac = (epoch - self.start_ramp) / (self.end_ramp - self.start_ramp)
        res = self.min_res + frac * (self.max_res - self.min_res)
        return round(res / self.multiple) * self.multiple

    @property
    def largest(self) -> int:
        return max(self.max_res, self(self.end_ramp - 1))


def linear_ramp(
    min_res: int, max_res: int, end_ramp: int, start_ramp: int = 0, multiple: int = 32
) -> Ramp:
    """FFCV's ``get_resolution`` as a schedule: e.g. ``linear_ramp(160, 192, end_ramp=13,
    start_ramp=11)`` for its 16-epoch ResNet-50 (sizes rounded to a multiple of 32)."""
    return Ramp(min_res, max_res, end_ramp, start_ramp, multiple)


class SizeSchedule:
    """``image_size`` per epoch (see the module's docstring). ``largest``: the (h, w) the
    batch buffers are sized for (the largest area)."""

    def __init__(self, value: Mapping[int, Any] | Callable[[int], Any]) -> None:
        if isinstance(value, Mapping):
            if not value:
                raise ConfigError("image_size={}: a schedule needs at least one epoch")
            if any(not isinstance(e, int) or e < 0 for e in value):
                raise ConfigError(f"image_size schedule {dict(value)!r}: epochs are ints >= 0")
            steps = sorted((e, as_size(v, f"image_size[{e}]")) for e, v in value.items())
            self._epochs = [e for e, _ in steps]
            self._sizes = [s for _, s in steps]
            self.fn: Callable[[int], Any] | None = None
            candidates = self._sizes
        elif callable(value):
            self.fn = value
            self._epochs, self._sizes = [], []
            if isinstance(value, Ramp):
                candidates = [as_size(value.largest, "linear_ramp")]
            else:
                candidates = [as_size(value(e), f"image_size({e})") for e in range(HORIZON)]
        else:
            raise ConfigError(f"image_size={value!r}: give a size, a mapping or a callable")
        self.largest: Size = max(candidates, key=lambda s: (s[0] * s[1], s))

    def __call__(self, epoch: int) -> Size:
        if self.fn is None:
            i = bisect.bisect_right(self._epochs, epoch) - 1
            return self._sizes[max(i, 0)]
        size = as_size(self.fn(epoch), f"image_size({epoch})")
        if size[0] > self.largest[0] or size[1] > self.largest[1]:
            raise ConfigError(
                f"image_size({epoch}) = {size} is larger than {self.largest}, the largest over "
                f"epochs 0-{HORIZON - 1} the batch buffers were sized for; use a mapping or "
                "linear_ramp, whose largest size is known"
            )
        return size

    def __repr__(self) -> str:
        if self.fn is not None:
            return f"SizeSchedule({self.fn!r})"
        return f"SizeSchedule({dict(zip(self._epochs, self._sizes, strict=True))})"


def as_schedule(value: Any) -> SizeSchedule | None:
    """A schedule for a mapping or callable ``image_size``; None for a fixed size (or None)."""
    if value is None or isinstance(value, int | tuple | list):
        return None
    return SizeSchedule(value)


__all__ = ["HORIZON", "Ramp", "SizeArg", "SizeSchedule", "as_schedule", "as_size", "linear_ramp"]
