"""What one ``wdstool stream-bench`` run measures: its configuration, checked where it is built.

The measured loader's settings are ``make_loader``'s keywords, held as one mapping (``loader``)
and declared nowhere else: a setting left out is ``make_loader``'s default, which
:meth:`BenchConfig.setting` reads from its signature for the baselines and the ceiling. The
other fields are the benchmark's own.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from loaders.make import make_loader
from wdstool.base.errors import ConfigError

# make_loader's keywords and their defaults: the one place the loader's settings are declared
LOADER_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {n: p.default for n, p in inspect.signature(make_loader).parameters.items()}
)
# make_loader's arguments that the benchmark sets itself, run by run
SET_PER_RUN = {
    "source": "give source= or sources=",
    "num_workers": "give workers=, a list of counts",
}


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    source: str
    # make_loader's keywords for the measured loader (batch_size, image_size, transform, ...)
    loader: Mapping[str, Any] = field(default_factory=dict)
    workers: tuple[int, ...] = (2,)
    batches: int | None = None
    epochs: int = 1
    warmup: int = 0
    step_ms: float = 0.0
    imagefolder: str | None = None
    webdataset: bool = False
    webdataset_fast: bool = False
    with_ceiling: bool = False
    repeats: int = 3
    transform_name: str = "default"  # what the transform was named (a preset or module:attr)
    tokenize: str | None = None  # a field whose text the stand-in tokenizer turns into ids
    plain: bool = False  # also run the loader with image + label only ("wdstool-plain")
    sources: tuple[tuple[str, float], ...] = ()  # a mixture instead of ``source`` (url, weight)
    threads: bool = False  # also run the loader with worker_mode="thread" ("wdstool-threads")
    exact: bool = False  # also run the loader with scaled_decode=False ("wdstool-exact")
    memory: bool = False  # sample the process tree's PSS (costs the pass a little throughput)

    def setting(self, name: str) -> Any:
        """The measured loader's setting ``name``: as given in ``loader``, else make_loader's
        default."""
        return self.loader.get(name, LOADER_DEFAULTS[name])

    def __post_init__(self) -> None:
        unknown = sorted(set(self.loader) - set(LOADER_DEFAULTS))
        if unknown:
            raise ConfigError(f"loader: make_loader has no keyword {', '.join(map(repr, unknown))}")
        for name, instead in SET_PER_RUN.items():
            if name in self.loader:
                raise ConfigError(f"loader: {name!r} is set by the benchmark; {instead}")
        object.__setattr__(self, "loader", dict(self.loader))  # a copy: the caller's may change
        if self.setting("batch_size") < 1 or self.repeats < 1 or self.epochs < 1 or self.warmup < 0:
            raise ConfigError("batch size, repeats and epochs must be >= 1, warmup >= 0")
        if not self.workers or min(self.workers) < 0:
            raise ConfigError(f"workers={self.workers}: list worker counts >= 0")
        if self.batches is not None and self.batches < 1:
            raise ConfigError(f"batches={self.batches}: must be >= 1")
        if self.step_ms < 0:
            raise ConfigError(f"step_ms={self.step_ms}: must be >= 0")
        transform, train = self.setting("transform"), self.setting("train")
        if transform is None and not train and (self.imagefolder or self.webdataset):
            raise ConfigError(
                "train=False: the imagefolder and webdataset baselines run the train "
                "augmentation; compare the eval path with exact=True, or give it as transform="
            )
        if self.webdataset_fast and (transform is not None or not train):
            raise ConfigError(
                "webdataset_fast=True runs the built-in train recipe; with transform= or "
                "train=False compare with webdataset=True"
            )
        if self.exact and not self.setting("scaled_decode"):
            raise ConfigError("exact=True with scaled_decode=False would compare a run with itself")
        if self.tokenize is not None and self.tokenize not in dict(self.setting("fields") or {}):
            raise ConfigError(
                f"tokenize={self.tokenize!r}: request that field too, as text (field "
                f"{self.tokenize!r} with spec 'txt')"
            )
        if self.tokenize is not None and self.setting("fields_fn") is not None:
            raise ConfigError("tokenize= runs its tokenizer as fields_fn: give one of the two")
