"""What one ``wdstool stream-bench`` run measures: its configuration, checked where it is built."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wdstool.base.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    source: str
    batch_size: int = 64
    workers: tuple[int, ...] = (2,)
    prefetch_factor: int = 4
    image_size: int = 224
    output: str = "uint8"
    channels_last: bool = False
    batches: int | None = None
    epochs: int = 1
    warmup: int = 0
    world_size: int = 1
    rank: int = 0
    step_ms: float = 0.0
    imagefolder: str | None = None
    webdataset: bool = False
    webdataset_fast: bool = False
    with_ceiling: bool = False
    repeats: int = 3
    shuffle_buffer: int = 2000
    storage_options: dict[str, Any] | None = None
    cache_dir: str | None = None
    cache_limit: int | None = None
    transform: Callable[[Any], Any] | None = field(default=None, compare=False)
    transform_name: str = "default"  # what the transform was named (a preset or module:attr)
    label: str | None = "cls"
    fields: tuple[tuple[str, str], ...] = ()  # (batch key, member spec)
    tokenize: str | None = None  # a field whose text the stand-in tokenizer turns into ids
    plain: bool = False  # also run the loader with image + label only ("wdstool-plain")
    sources: tuple[tuple[str, float], ...] = ()  # a mixture instead of ``source`` (url, weight)
    worker_mode: str = "process"
    threads: bool = False  # also run the loader with worker_mode="thread" ("wdstool-threads")
    epoch_size: int | None = None
    train: bool = True  # False: the eval transform (resize + centre crop)
    scaled_decode: bool = True  # make_loader(scaled_decode=...): large JPEG regions scaled
    exact: bool = False  # also run the loader with scaled_decode=False ("wdstool-exact")
    memory: bool = False  # sample the process tree's PSS (costs the pass a little throughput)

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.repeats < 1 or self.epochs < 1 or self.warmup < 0:
            raise ConfigError("batch size, repeats and epochs must be >= 1, warmup >= 0")
        if not self.workers or min(self.workers) < 0:
            raise ConfigError(f"workers={self.workers}: list worker counts >= 0")
        if self.batches is not None and self.batches < 1:
            raise ConfigError(f"batches={self.batches}: must be >= 1")
        if self.step_ms < 0:
            raise ConfigError(f"step_ms={self.step_ms}: must be >= 0")
        if self.transform is None and not self.train and (self.imagefolder or self.webdataset):
            raise ConfigError(
                "train=False: the imagefolder and webdataset baselines run the train "
                "augmentation; compare the eval path with exact=True, or give it as transform="
            )
        if self.webdataset_fast and (self.transform is not None or not self.train):
            raise ConfigError(
                "webdataset_fast=True runs the built-in train recipe; with transform= or "
                "train=False compare with webdataset=True"
            )
        if self.exact and not self.scaled_decode:
            raise ConfigError("exact=True with scaled_decode=False would compare a run with itself")
        if self.tokenize is not None and self.tokenize not in dict(self.fields):
            raise ConfigError(
                f"tokenize={self.tokenize!r}: request that field too, as text (field "
                f"{self.tokenize!r} with spec 'txt')"
            )
