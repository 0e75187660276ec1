"""What every kind of output is to the rest of the loader: one small interface.

A kind says how one sample is decoded (into its place in the batch, where it has one), the
shape and size of a batch's pool slot, which batch keys it fills, and what it refuses
(ConfigErrors, checked at ``make_loader``). :class:`loaders.batch.BatchAssembler` keeps what
all kinds share (iterating the plan's samples, replacing bad ones, the labels, keys, fields,
sources and valid flags, the hand-off); the pool, the dataset and the loader ask the kind
instead of branching on it. The kinds are registered in :mod:`loaders.kinds`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from loaders.config import LoaderConfig
from loaders.delivery import BatchMeta, Decoded, Slot
from loaders.read import Located
from loaders.recipe import Recipe, Seeder
from wdstool.base.errors import SampleError
from wdstool.format.images import IMAGE_ORDER
from wdstool.format.mapped import materialized

NextSample = Callable[[], Decoded]  # the next sample of the batch (decoded by the kind)


class OutputKind:
    """One kind of output: the settings it applies to, and, built for one pass (one epoch's
    recipes), how it decodes samples and fills batches."""

    name: ClassVar[str]
    pixel_key: ClassVar[str]  # the batch entry holding the kind's pooled tensors
    listed: ClassVar[bool] = False  # that entry is a list of tensors (one per view)
    keys: ClassVar[tuple[str, ...]] = ()  # every batch key the kind fills (see RESERVED)
    settings: ClassVar[type | None] = None  # its own settings object (Clips), if it has one
    adds_fields: ClassVar[bool] = False  # its samples add fields (collated as fields are)
    wraps_errors: ClassVar[bool] = True  # an exception decoding a sample names the sample

    def __init__(self, config: LoaderConfig, recipes: tuple[Recipe, ...]) -> None:
        self.config = config
        self.recipes = recipes

    # --- at make_loader, before any worker --------------------------------------------
    @staticmethod
    def applies(config: LoaderConfig) -> bool:
        """Whether a loader of ``config`` makes this kind's batches."""
        raise NotImplementedError

    @classmethod
    def arguments(
        cls, settings: Any, *, views: Any, output: str, channels_last: bool, repeats: int
    ) -> tuple[str, int]:
        """``make_loader``'s ``output`` and ``repeats`` for a loader given this kind's
        ``settings`` object, checked against the other arguments (one-line ConfigErrors)."""
        return output, repeats

    @classmethod
    def settle(cls, sources: Sequence[Any], config: LoaderConfig) -> tuple[list[Any], LoaderConfig]:
        """The loader's sources (``loaders.dataset.LoaderSource``) and config as this kind
        needs them, once the sources are known; what it refuses (one-line ConfigErrors)."""
        return list(sources), config

    @classmethod
    def slot_bytes(cls, config: LoaderConfig) -> int:
        """Bytes of one batch's pool slot (its largest batch over the epochs, labels
        included); 0: batches are allocated, not pooled."""
        return 0

    @classmethod
    def batch_keys(cls, config: LoaderConfig) -> tuple[str, ...]:
        """The batch keys this kind fills for ``config`` (besides labels, keys, source,
        valid and the fields)."""
        return cls.keys

    @classmethod
    def describe(cls, config: LoaderConfig) -> str:
        """What this kind makes, for the loader's line in the log ("": nothing to add)."""
        return ""

    # --- in the worker, for one pass ---------------------------------------------------
    def decode(
        self, loc: Located, rng: random.Random, seeder: Seeder, where: str
    ) -> tuple[Any, dict[str, Any] | None]:
        """One sample: its payload (what :meth:`fill` batches) and the fields it adds."""
        raise NotImplementedError

    def fill(self, next_sample: NextSample, n: int, out: Slot, meta: BatchMeta) -> dict[str, Any]:
        """The next ``n`` samples as this kind's batch entries (in ``out``'s slot where it is
        pooled); every sample also goes to ``meta``."""
        raise NotImplementedError


def image_part(loc: Located) -> bytes:
    """The sample's image member (the first of ``IMAGE_ORDER`` it has)."""
    parts = loc.sample.parts  # type: ignore[union-attr]
    for ext in IMAGE_ORDER:
        if ext in parts:
            return materialized(parts[ext])  # type: ignore[no-any-return]
    raise SampleError(f"{loc.url}: sample {loc.sample.key!r} has no image member")  # type: ignore[union-attr]


__all__ = ["NextSample", "OutputKind", "image_part"]
