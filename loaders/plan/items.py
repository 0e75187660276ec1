"""What a plan is made of: slices of shards, and pieces of an interrupted epoch's remainder."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loaders.plan.shuffle import block_permutation


@dataclass(frozen=True)
class Slice:
    """Samples [start, stop) of shard ``shard`` (an index into the shard list), in that order."""

    shard: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Piece:
    """Items [lo, hi) of the concatenated items of ``base`` (slices, or pieces in turn) from which
    the first ``exclude`` positions of ``block_permutation(seed, len(base items))`` are removed.

    A resumed epoch's remaining samples are pieces: a block a worker had partly delivered when
    the state was saved is the whole block minus what it delivered. ``len`` is O(1)."""

    base: tuple[Slice | Piece, ...]
    lo: int
    hi: int
    seed: int | None = None
    exclude: int = 0

    def __len__(self) -> int:
        return self.hi - self.lo

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


Item = Slice | Piece


def merge_slices(slices: list[Slice]) -> tuple[Slice, ...]:
    merged: list[Slice] = []
    for s in slices:
        if merged and merged[-1].shard == s.shard and merged[-1].stop == s.start:
            merged[-1] = Slice(s.shard, merged[-1].start, s.stop)
        else:
            merged.append(s)
    return tuple(merged)


def take_items(items: list[Item], start: int, length: int) -> list[Item]:
    """Sub-range [start, start+length) of the concatenated items (slices and pieces)."""
    out: list[Item] = []
    pos = 0
    for it in items:
        n = len(it)
        lo, hi = max(start, pos), min(start + length, pos + n)
        if lo < hi:
            a, b = lo - pos, hi - pos
            if isinstance(it, Slice):
                out.append(Slice(it.shard, it.start + a, it.start + b))
            else:
                out.append(Piece(it.base, it.lo + a, it.lo + b, it.seed, it.exclude))
        pos += n
        if pos >= start + length:
            break
    return out
