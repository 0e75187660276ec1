"""What a plan is made of: slices of shards, mixes of sources, and pieces of a remainder.

- :class:`Slice`: consecutive samples of one shard of one source.
- :class:`Mix`: a stretch of several sources' item lists interleaved evenly
  (:mod:`loaders.plan.even_merge`): how a rank's and a worker's share of a mixture is read.
- :class:`Piece`: what is left of a shuffle block a worker had partly delivered when a resumed
  epoch's state was saved.

Every item knows its length in O(1) and can be cut (:func:`take_items`) without listing samples.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from loaders.plan.even_merge import counts_before
from loaders.plan.shuffle import block_permutation


@dataclass(frozen=True)
class Slice:
    """Samples [start, stop) of shard ``shard`` of source ``source``, in that order. ``rep``
    counts the earlier times these samples were planned this epoch (their own augmentation draw);
    ``pad`` marks padding repeats (``uneven="pad"|"mask"``)."""

    shard: int
    start: int
    stop: int
    source: int = 0
    rep: int = 0
    pad: bool = False

    def __len__(self) -> int:
        return self.stop - self.start

    def cut(self, a: int, b: int) -> Slice:
        return Slice(self.shard, self.start + a, self.start + b, self.source, self.rep, self.pad)


@dataclass(frozen=True)
class Mix:
    """Positions [lo, hi) of the even interleave of ``parts`` (one item list per source, part
    ``i`` holding ``spans[i]`` samples)."""

    parts: tuple[tuple[Item, ...], ...]
    spans: tuple[int, ...]
    lo: int
    hi: int
    pad: bool = False

    def __len__(self) -> int:
        return self.hi - self.lo

    def cut(self, a: int, b: int) -> Mix:
        return Mix(self.parts, self.spans, self.lo + a, self.lo + b, self.pad)

    def per_source(self) -> list[list[Item]]:
        """Each source's items in this stretch."""
        first = counts_before(self.spans, self.lo)
        last = counts_before(self.spans, self.hi)
        return [
            take_items(list(part), a, b - a)
            for part, a, b in zip(self.parts, first, last, strict=True)
        ]


@dataclass(frozen=True)
class Piece:
    """Items [lo, hi) of the concatenated items of ``base`` from which the first ``exclude``
    positions of ``block_permutation(seed, len(base items))`` are removed.

    A resumed epoch's remaining samples are pieces: a block a worker had partly delivered when
    the state was saved is the whole block minus what it delivered. ``len`` is O(1)."""

    base: tuple[Item, ...]
    lo: int
    hi: int
    seed: int | None = None
    exclude: int = 0
    pad: bool = False

    def __len__(self) -> int:
        return self.hi - self.lo

    def cut(self, a: int, b: int) -> Piece:
        return Piece(self.base, self.lo + a, self.lo + b, self.seed, self.exclude, self.pad)

    @property
    def base_len(self) -> int:
        return sum(len(b) for b in self.base)

    def kept(self) -> np.ndarray:
        """Indices into the base items that this piece yields, in order."""
        n = self.base_len
        if not self.exclude:
            return np.arange(self.lo, self.hi)
        mask = np.ones(n, dtype=bool)
        mask[block_permutation(self.seed or 0, n)[: self.exclude]] = False
        return np.flatnonzero(mask)[self.lo : self.hi]


Item = Slice | Mix | Piece


def as_pad(item: Item) -> Item:
    """The same samples, marked as padding (every sample it yields is a planned repeat)."""
    return replace(item, pad=True)


def merge_slices(slices: list[Slice]) -> tuple[Slice, ...]:
    merged: list[Slice] = []
    for s in slices:
        last = merged[-1] if merged else None
        if (
            last is not None
            and (last.shard, last.source, last.rep, last.pad) == (s.shard, s.source, s.rep, s.pad)
            and last.stop == s.start
        ):
            merged[-1] = Slice(s.shard, last.start, s.stop, s.source, s.rep, s.pad)
        else:
            merged.append(s)
    return tuple(merged)


def take_items(items: list[Item], start: int, length: int) -> list[Item]:
    """Sub-range [start, start+length) of the concatenated items."""
    out: list[Item] = []
    pos = 0
    for it in items:
        n = len(it)
        lo, hi = max(start, pos), min(start + length, pos + n)
        if lo < hi:
            out.append(it.cut(lo - pos, hi - pos))
        pos += n
        if pos >= start + length:
            break
    return out
