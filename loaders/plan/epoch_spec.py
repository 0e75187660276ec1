"""What the plan takes besides the data: what an epoch is (:class:`EpochSpec`) and where it runs
(:class:`Topology`). Frozen values, each rule checked once, where the value is built."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeVar

from wdstool.base.errors import ConfigError


class Uneven(StrEnum):
    PAD = "pad"  # every rank ceil(N/W) samples: at most one repeated
    DROP = "drop"  # every rank floor(N/W): at most W-1 samples left out
    MASK = "mask"  # ceil(N/W) slots, every sample exactly once, padding flagged invalid


class Split(StrEnum):
    SAMPLES = "samples"  # a rank's share: a run of samples, cut wherever its ends fall
    SHARDS = "shards"  # a rank's share: whole shards, every rank padded to the same count


E = TypeVar("E", bound=StrEnum)


def as_enum(cls: type[E], name: str, value: object) -> E:
    """``cls(value)``, or a one-line ConfigError naming the setting and its choices."""
    try:
        return cls(value)
    except ValueError:
        choices = ", ".join(repr(e.value) for e in cls)
        raise ConfigError(f"{name}={value!r} is not one of {choices}") from None


def as_uneven(value: Uneven | str) -> Uneven:
    return as_enum(Uneven, "uneven", value)


def k_of(num_workers: int) -> int:
    """Streams per rank: one per DataLoader worker, one in-process stream for 0 workers."""
    return max(1, num_workers)


@dataclass(frozen=True, kw_only=True)
class EpochSpec:
    """What an epoch is: its seed and number, the batch size, the shuffle (and its buffer of
    compressed samples per worker), and how ranks even out (``uneven``, ``drop_last``) and
    where their shares are cut (``split``: between samples, or between shards only). The
    sources, their weights, ``epoch_size`` and ``repeats`` are the mixture's."""

    seed: int = 0
    epoch: int = 0
    batch_size: int = 64
    shuffle: bool = True
    shuffle_buffer: int = 2000
    uneven: Uneven = Uneven.PAD
    drop_last: bool = False
    split: Split = Split.SAMPLES

    def __post_init__(self) -> None:
        object.__setattr__(self, "uneven", as_uneven(self.uneven))
        object.__setattr__(self, "split", as_enum(Split, "split", self.split))
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.seed < 0 or self.epoch < 0:
            raise ConfigError(
                f"seed and epoch must be >= 0, got seed={self.seed}, epoch={self.epoch}"
            )
        if self.shuffle_buffer < 0:
            raise ConfigError(f"shuffle_buffer must be >= 0, got {self.shuffle_buffer}")
        if self.uneven is Uneven.MASK and self.drop_last:
            raise ConfigError(
                "uneven='mask' delivers every sample exactly once; drop_last=True would leave "
                "some out"
            )

    def at(self, epoch: int) -> EpochSpec:
        """The same spec for ``epoch``."""
        return self if epoch == self.epoch else replace(self, epoch=epoch)

    @property
    def buffer(self) -> int:
        """The shuffle buffer in effect (0 without shuffle)."""
        return self.shuffle_buffer if self.shuffle else 0


@dataclass(frozen=True)
class Topology:
    """Where the epoch runs: this rank of ``world_size``, with ``num_workers`` DataLoader
    workers (0: the rank's one stream runs in its own process)."""

    rank: int = 0
    world_size: int = 1
    num_workers: int = 0

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ConfigError(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is outside 0..{self.world_size - 1}")
        if self.num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {self.num_workers}")

    @property
    def streams(self) -> int:
        """Streams per rank (:func:`k_of` its workers)."""
        return k_of(self.num_workers)

    def at(self, rank: int) -> Topology:
        return self if rank == self.rank else replace(self, rank=rank)


__all__ = ["EpochSpec", "Split", "Topology", "Uneven", "as_enum", "as_uneven", "k_of"]
