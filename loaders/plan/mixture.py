"""Several sources in one epoch by weight: shares, per-source cursors, each source's epoch items.

- An epoch holds ``epoch_size`` samples (default: the sum of the sources' sizes), split over the
  sources in proportion to their weights by largest remainders (ties to the lower index): exact
  totals, the same on every rank, deterministic.
- A source whose share ``s`` exceeds its size ``n`` is read ``s // n`` times whole (each pass in
  its own seeded shard order) plus a window of ``s % n`` samples; a source with ``s < n`` gives
  just the window. The window walks the source's shards in one seeded order, continuing where
  the previous epoch's window stopped (the source's cursor): every sample is seen once before
  any is seen again, and every sample comes ``s // n`` or ``s // n + 1`` times per epoch.
- ``Slice.rep`` numbers the passes, so a repeated sample gets its own augmentation draw.
- Repeated augmentation (``repeats=k``, DeiT's RASampler done right for a streaming loader): a
  source's epoch share ``s`` is made of ``d = ceil(s / k)`` distinct samples (its walk and
  passes as above, sized ``d``), listed ``k`` times over in the same order, each copy with its
  own ``rep`` (its own augmentation draw), the sequence cut at ``s``: the last ``k*d - s``
  samples of the last copy are dropped, so those samples come ``k - 1`` times (for shares of at
  least ``k*(k-1) + 1``; each sample comes ``s // d`` or ``s // d + 1`` times). Copies of a
  sample lie ``d`` positions apart, at least a rank's span, so with ``world_size >= k`` the
  ``k`` copies go to ``k`` different ranks; the cursor advances by ``d`` per epoch, so every
  sample of a source is used within ``ceil(n / d)`` consecutive epochs (``k`` for a source read
  whole).

A single source with its own size as the epoch (the default) plans exactly what ``plan_epoch``
always planned: one pass, in the epoch's seeded shard order, rotated by a seeded offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from loaders.plan.items import Slice
from wdstool.base.errors import ConfigError


@dataclass(frozen=True)
class MixSource:
    """One source as the plan sees it: shard sample counts, a weight, and ``key``, a stable
    integer from the source's identity that seeds its walk."""

    sizes: tuple[int, ...]
    weight: float = 1.0
    key: int = 0

    @cached_property
    def num_samples(self) -> int:
        return sum(self.sizes)


@dataclass(frozen=True)
class Mixture:
    """The sources of an epoch and where their cursors stood at ``start_epoch`` (samples taken
    from each before it); later epochs advance each cursor by the source's share."""

    sources: tuple[MixSource, ...]
    epoch_size: int | None = None
    start_epoch: int = 0
    cursors: tuple[int, ...] = field(default=())
    repeats: int = 1  # copies of each sample per epoch (repeated augmentation)

    def __post_init__(self) -> None:
        if not self.sources:
            raise ConfigError("a mixture needs at least one source")
        for i, s in enumerate(self.sources):
            if not s.weight > 0:
                raise ConfigError(f"source {i}: weight must be > 0, got {s.weight!r}")
            if s.num_samples <= 0:
                raise ConfigError(f"source {i} has no samples; remove it or give it data")
        if self.epoch_size is not None and self.epoch_size < 1:
            raise ConfigError(f"epoch_size must be >= 1, got {self.epoch_size}")
        if self.cursors and len(self.cursors) != len(self.sources):
            raise ConfigError("one cursor per source")
        if not isinstance(self.repeats, int) or self.repeats < 1:
            raise ConfigError(f"repeats must be an int >= 1, got {self.repeats!r}")

    @property
    def total(self) -> int:
        """Samples per epoch."""
        return self.epoch_size if self.epoch_size is not None else self.num_samples

    @property
    def num_samples(self) -> int:
        return sum(s.num_samples for s in self.sources)

    def shares(self) -> list[int]:
        return apportion(self.total, [s.weight for s in self.sources])

    def distinct(self) -> list[int]:
        """Distinct samples each source gives an epoch: its share, or ``ceil(share / repeats)``."""
        return [distinct_of(s, self.repeats) for s in self.shares()]

    def cursors_at(self, epoch: int) -> list[int]:
        """Samples taken from each source before ``epoch`` (for ``epoch >= start_epoch``)."""
        base = self.cursors or (0,) * len(self.sources)
        done = max(0, epoch - self.start_epoch)
        return [c + done * d for c, d in zip(base, self.distinct(), strict=True)]


def distinct_of(share: int, repeats: int) -> int:
    """Distinct samples in a share of an epoch whose samples come ``repeats`` times each (the
    cursor advances by it, the epoch's walk takes it)."""
    return -(-share // repeats)


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split in proportion to ``weights``: largest remainders, ties to the lower index.
    Exact in rational arithmetic for float weights."""
    from fractions import Fraction

    ws = [Fraction(w) for w in weights]
    whole = sum(ws)
    quotas = [total * w / whole for w in ws]
    floors = [int(q) for q in quotas]
    left = total - sum(floors)
    order = sorted(range(len(ws)), key=lambda i: (-(quotas[i] - floors[i]), i))
    for i in order[:left]:
        floors[i] += 1
    return floors


class Pass:
    """One pass over a source's shards in an order, rotated by ``offset`` samples (``whole``:
    moved on to the next shard's start, so the pass starts and ends between shards)."""

    def __init__(
        self,
        sizes: np.ndarray,
        order: np.ndarray,
        offset: int,
        source: int,
        rep: int,
        whole: bool = False,
    ) -> None:
        self.order = order
        self.ends = np.cumsum(sizes[order])  # end position of each shard (unrotated)
        self.total = int(self.ends[-1])
        self.offset = offset % self.total if self.total else 0
        if whole and self.total:
            at = int(np.searchsorted(self.ends, self.offset, side="left"))
            self.offset = int(self.ends[at]) % self.total if self.offset else 0
        self.source, self.rep = source, rep

    def next_start(self, pos: int) -> int:
        """The first position at or after ``pos`` (of the rotated pass) where a shard starts,
        or ``total``."""
        u = (pos + self.offset) % self.total
        at = int(np.searchsorted(self.ends, u, side="left"))
        step = 0 if u == 0 or int(self.ends[at]) == u else int(self.ends[at]) - u
        return min(pos + step, self.total)

    def copy(self, rep: int) -> Pass:
        """The same pass as another occurrence (``rep``): the same samples, their own draws."""
        other = object.__new__(Pass)
        other.__dict__.update(self.__dict__)
        other.rep = rep
        return other

    def slices(self, start: int, length: int) -> list[Slice]:
        """Slices covering positions [start, start + length) of the rotated pass (wrapping)."""
        out: list[Slice] = []
        pos = (start + self.offset) % self.total
        while length > 0:
            chunk = min(length, self.total - pos)
            out.extend(self._unrotated(pos, chunk))
            length -= chunk
            pos = 0
        return out

    def _unrotated(self, pos: int, length: int) -> list[Slice]:
        out = []
        i = int(np.searchsorted(self.ends, pos, side="right"))
        while length > 0:
            shard_start = int(self.ends[i - 1]) if i else 0
            first = pos - shard_start
            take = min(length, int(self.ends[i]) - pos)
            if take > 0:
                out.append(Slice(int(self.order[i]), first, first + take, self.source, self.rep))
            pos += take
            length -= take
            i += 1
        return out


class SourceEpoch:
    """A source's items in one epoch: ``passes`` whole passes, then ``window`` samples of its
    walk from ``cursor``; ``take(start, length)`` lists the slices of any stretch."""

    def __init__(
        self,
        src: MixSource,
        index: int,
        share: int,
        cursor: int,
        *,
        seed: int,
        epoch: int,
        shuffle: bool,
        repeats: int = 1,
        whole: bool = False,
    ) -> None:
        """``whole``: each pass starts at a shard's start (``split="shards"``)."""
        sizes = np.asarray(src.sizes, dtype=np.int64)
        n = int(sizes.sum())
        self.share = share
        distinct = distinct_of(share, repeats)
        q, m = divmod(distinct, n)
        self.parts: list[tuple[int, Pass, int]] = []  # (length, pass, first position in it)
        for rep in range(q):
            if shuffle:
                extra = [] if (index, rep) == (0, 0) else [index, rep]
                rng = np.random.Generator(
                    np.random.PCG64(np.random.SeedSequence([seed, epoch, 0x5EED, *extra]))
                )
                order, offset = rng.permutation(len(sizes)), int(rng.integers(n))
            else:
                order, offset = np.arange(len(sizes)), 0
            self.parts.append((n, Pass(sizes, order, offset, index, rep, whole), 0))
        if m:
            if shuffle:
                rng = np.random.Generator(
                    np.random.PCG64(np.random.SeedSequence([seed, src.key, 0x3A1C]))
                )
                walk = rng.permutation(len(sizes))
            else:
                walk = np.arange(len(sizes))
            self.parts.append((m, Pass(sizes, walk, 0, index, q), cursor % n))
        if repeats > 1:  # the distinct samples k times over, each copy its own occurrences
            reps = q + (1 if m else 0)
            once = self.parts
            self.parts = [
                (length, p.copy(p.rep + c * reps) if c else p, first)
                for c in range(repeats)
                for length, p, first in once
            ]

    def shard_start(self, pos: int) -> int:
        """The first position at or after ``pos`` where a shard (or a part: a pass, the
        window) starts, or the share's end: where ``split="shards"`` may cut."""
        start = 0
        for n, p, first in self.parts:
            if pos == start:
                return min(pos, self.share)
            if pos < start + n:
                rotated = (first + pos - start) % p.total
                ahead = p.next_start(rotated) - rotated
                return min(pos + ahead, start + n, self.share)
            start += n
        return self.share

    def take(self, start: int, length: int) -> list[Slice]:
        out: list[Slice] = []
        pos = 0
        for n, p, first in self.parts:
            lo, hi = max(start, pos), min(start + length, pos + n)
            if lo < hi:
                out.extend(p.slices(first + lo - pos, hi - lo))
            pos += n
            if pos >= start + length:
                break
        return out
