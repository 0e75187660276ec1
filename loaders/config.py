"""The loader's settings: one frozen, validated config; choices are enums."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from loaders.plan import Uneven
from loaders.recipe import as_size
from wdstool.base.errors import ConfigError, OnError


class Output(StrEnum):
    UINT8 = "uint8"
    FLOAT = "float"
    ENCODED = "encoded"  # compressed bytes + augmentation draws, for loaders.DeviceDecoder


class WorkerMode(StrEnum):
    PROCESS = "process"  # DataLoader worker processes (torch's usual way)
    THREAD = "thread"  # decode threads in the loader's process: one heap, one torch


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    batch_size: int = 64
    # None: 224, or the transform's own; a mapping or callable: a size per epoch
    image_size: Any = None
    train: bool = True
    shuffle: bool = True
    shuffle_buffer: int = 2000
    seed: int = 0
    num_workers: int = 0
    uneven: Uneven = Uneven.PAD
    drop_last: bool = False
    output: Output = Output.UINT8
    on_error: OnError = OnError.RAISE
    channels_last: bool = False
    scaled_decode: bool = True  # large JPEG regions decoded at 1/2, 1/4, 1/8 scale (augment.py)
    max_replaced: int | float | None = None  # samples a rank may replace per epoch (or a share)
    worker_mode: WorkerMode = WorkerMode.PROCESS
    repeats: int = 1  # repeated augmentation: each epoch's samples k times over (loaders.plan)

    def __post_init__(self) -> None:
        for name in ("uneven", "output", "on_error", "worker_mode"):
            enum = {
                "uneven": Uneven,
                "output": Output,
                "on_error": OnError,
                "worker_mode": WorkerMode,
            }[name]
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, enum(value))
            except ValueError:
                choices = ", ".join(repr(e.value) for e in enum)
                raise ConfigError(f"{name}={value!r} is not one of {choices}") from None
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if isinstance(self.image_size, int | tuple | list):
            size = as_size(self.image_size)
            if min(size) < 8:
                raise ConfigError(f"image_size must be >= 8, got {self.image_size}")
        if self.shuffle_buffer < 0:
            raise ConfigError(f"shuffle_buffer must be >= 0, got {self.shuffle_buffer}")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise ConfigError(f"repeats must be an int >= 1, got {self.repeats!r}")
        if self.num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {self.num_workers}")
        if self.uneven is Uneven.MASK and self.drop_last:
            raise ConfigError(
                "uneven='mask' delivers every sample exactly once; drop_last=True would leave "
                "some out"
            )
        m = self.max_replaced
        if m is not None and (
            isinstance(m, bool)
            or not isinstance(m, int | float)
            or (isinstance(m, int) and m < 0)
            or (isinstance(m, float) and not 0 <= m < 1)
        ):
            raise ConfigError(
                f"max_replaced={m!r}: give a count (an int >= 0) or a share of the rank's epoch "
                "(a float in [0, 1))"
            )
