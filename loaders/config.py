"""The loader's settings: a few frozen values, each rule checked once, where its value is built,
gathered in one :class:`LoaderConfig` that everything downstream of ``make_loader`` reads.

- what an epoch is: :class:`loaders.plan.EpochSpec` (seed, batch size, shuffle and its buffer,
  ``uneven``, ``drop_last``), the plan's own; what it holds: ``epoch_size``, ``repeats``
  (the mixture's, ``loaders.plan.mixture``);
- what turns images into pixels: :class:`loaders.recipe.book.Recipes`;
- what a batch is made of: :class:`BatchSettings`, and a kind's own settings object
  (``sample``: a :class:`loaders.Clips`; ``loaders.kinds``), ``pads``;
- where the workers run: :class:`WorkerSettings`;
- where the data is: :class:`loaders.source.ShardAccess`; who this rank is:
  :class:`loaders.plan.Topology` (kept beside the config: the autotuner changes its workers).

``make_loader``'s flat keywords are a thin layer that builds these; its defaults are theirs (a
test holds the two together).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from loaders.plan import EpochSpec, as_enum
from loaders.recipe.book import Recipes
from loaders.schema import Pad
from wdstool.base.errors import ConfigError, OnError


class Output(StrEnum):
    AUTO = "auto"  # what the recipe gives: uint8, or float for a pipeline that normalizes
    UINT8 = "uint8"
    FLOAT = "float"
    ENCODED = "encoded"  # compressed bytes + the recipe's geometry, for loaders.DeviceDecoder


class WorkerMode(StrEnum):
    PROCESS = "process"  # DataLoader worker processes (torch's usual way)
    THREAD = "thread"  # decode threads in the loader's process: one heap, one torch


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """Where the workers run: ``num_workers`` DataLoader worker processes (or decode threads,
    ``mode="thread"``), ``prefetch_factor`` batches ahead each, pinned memory (None: where CUDA
    is), persistent across epochs, the multiprocessing start method (``context``)."""

    num_workers: int = 0
    mode: WorkerMode = WorkerMode.PROCESS
    prefetch_factor: int = 4
    pin_memory: bool | None = None
    persistent: bool = True
    context: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", as_enum(WorkerMode, "worker_mode", self.mode))
        if self.num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {self.num_workers}")
        if self.prefetch_factor < 1:
            raise ConfigError(f"prefetch_factor must be >= 1, got {self.prefetch_factor}")


@dataclass(frozen=True, kw_only=True)
class BatchSettings:
    """What a batch is made of: ``output`` uint8, normalized float or encoded bytes (``auto``:
    float where the recipe ends in float, as a pipeline with ToTensor + Normalize does, else
    uint8; make_loader settles it from the recipe); the
    channels-last layout; the DCT-scaled decode of large regions; what a bad sample does
    (``on_error``) and how many may be replaced per epoch (``max_replaced``: a count, or a
    share of the rank's epoch; 10% by default, so that "a third of the epoch replaced" is an
    error, not a quiet success; None: no limit)."""

    output: Output = Output.AUTO
    channels_last: bool = False
    scaled_decode: bool = True
    on_error: OnError = OnError.RAISE
    max_replaced: int | float | None = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "output", as_enum(Output, "output", self.output))
        object.__setattr__(self, "on_error", as_enum(OnError, "on_error", self.on_error))
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


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """The settings of one loader (see the module's docstring)."""

    epoch: EpochSpec = field(default_factory=EpochSpec)
    epoch_size: int | None = None  # samples per epoch (None: the sources' total)
    repeats: int = 1  # each sample k times an epoch, each copy with its own draws
    recipes: Recipes = field(default_factory=lambda: Recipes(None))
    batch: BatchSettings = field(default_factory=BatchSettings)
    sample: Any = None  # a kind's own settings (loaders.Clips), None: images
    pads: tuple[tuple[str, Pad], ...] = ()  # fields batched by padding (pad_fields)
    with_source: bool = False  # batches carry "source" (a mixture of Source objects)
    workers: WorkerSettings = field(default_factory=WorkerSettings)
    max_workers: int = 0  # the most workers the autotuner may give it (buffers laid out)
    stats: bool = True  # the stage clocks and per-batch records of loader.stats()


__all__ = ["BatchSettings", "LoaderConfig", "OnError", "Output", "WorkerMode", "WorkerSettings"]
