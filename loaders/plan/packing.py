"""Packing samples into sequences of at most ``capacity`` tokens (pure).

A planner calls :func:`pack_sequences` on one rank's sample order with each sample's token count
known ahead (its images' tokens plus its text's): the answer says which samples (or pieces of
samples) each sequence holds, in stream order. Indices are positions in the ``lengths`` given,
so the planner maps them back through its own order (``order[packing.index]``).

Two methods are online over the stream, in its order:

- ``first_fit``: a sample goes into the open sequence opened first that still has room for it;
- ``best_fit``: into the open sequence with the least room left that still fits it (ties: the
  one opened first).

The third sees the whole stream first, as a planner that knows every length ahead can:

- ``best_fit_decreasing``: best-fit over the entries sorted by length, longest first (ties in
  stream order); each sequence's entries are still listed in stream order. A sorted stream
  fills each sequence's room with the small samples that come last, so about half the padding
  of the online methods is left (``bench/results/packing.md``); give it ``window=None`` (every
  sequence open) for that: a bound closes sequences before the small samples arrive.

A sample that fits no open sequence opens a new one. With ``window=W`` at most W sequences are
open at once: before a new one opens, the open sequence with the least room left is closed (ties:
the one opened first), so the least is wasted and memory stays bounded. A sequence whose room
reaches 0 closes at once and does not count against the window. Sequences are numbered in the
order they opened; each holds its entries in stream order. Every choice is a pure function of
(lengths, capacity, method, window, overflow): no randomness.

The window bounds how many sequences are open (memory), not how far apart in the stream one
sequence's samples lie: a sequence with room left stays open while others are fuller. A planner
that needs a bounded lookahead packs its stream in chunks of consecutive samples.

Each step is O(log n): the open sequences by room are a bitset over room values (a Python int:
the smallest room >= t is one shift and one lowest bit) with a heap of sequence ids per room;
first-fit adds a max tree over sequence ids (the first id with room >= t is one descent).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import numpy as np

from loaders.plan.epoch_spec import as_enum
from wdstool.base.errors import ConfigError


class Fit(StrEnum):
    FIRST = "first_fit"
    BEST = "best_fit"
    BEST_DECREASING = "best_fit_decreasing"


class Overflow(StrEnum):
    TRUNCATE = "truncate"  # kept whole as its first `capacity` tokens
    SPLIT = "split"  # cut into pieces of `capacity` tokens (the last one shorter)
    DROP = "drop"  # left out


class Span(NamedTuple):
    """One entry of a sequence: tokens [offset, offset + tokens) of sample ``index``. A sample
    that fits is one span (offset 0, all its tokens); a truncated one is (i, 0, capacity); a
    split one is pieces (i, 0, L), (i, L, L), ..., (i, k*L, rest), in that order in the stream."""

    index: int
    offset: int
    tokens: int


@dataclass(frozen=True, eq=False)
class Packing:
    """The sequences as flat arrays: the entries of sequence ``s`` are rows
    ``bounds[s]:bounds[s + 1]`` of ``index``, ``offset`` and ``tokens`` (see :class:`Span`).

    Counts: ``truncated``, ``split`` and ``dropped`` samples (those longer than ``capacity``,
    by ``overflow``); ``used_tokens`` packed; ``padded_tokens`` = sequences x capacity - used;
    ``lost_tokens``: tokens of the stream in no sequence (cut off by truncation, or dropped)."""

    capacity: int
    index: np.ndarray
    offset: np.ndarray
    tokens: np.ndarray
    bounds: np.ndarray
    truncated: int = 0
    split: int = 0
    dropped: int = 0
    used_tokens: int = 0
    padded_tokens: int = 0
    lost_tokens: int = 0

    @property
    def num_sequences(self) -> int:
        return len(self.bounds) - 1

    @property
    def padded_share(self) -> float:
        """Padded tokens over all tokens of all sequences (0.0 when there are none)."""
        total = self.num_sequences * self.capacity
        return self.padded_tokens / total if total else 0.0

    def sequence(self, s: int) -> list[Span]:
        a, b = int(self.bounds[s]), int(self.bounds[s + 1])
        cols = (self.index[a:b].tolist(), self.offset[a:b].tolist(), self.tokens[a:b].tolist())
        return [Span(*row) for row in zip(*cols, strict=True)]

    def sequences(self) -> list[list[Span]]:
        return [self.sequence(s) for s in range(self.num_sequences)]

    def indices(self) -> list[list[int]]:
        """Each sequence's sample indices (a split sample's once per piece it holds)."""
        if not self.num_sequences:
            return []
        return [part.tolist() for part in np.split(self.index, self.bounds[1:-1])]

    def sequence_tokens(self) -> np.ndarray:
        """Tokens used in each sequence."""
        sums = np.cumsum(np.concatenate([[0], self.tokens]))
        return sums[self.bounds[1:]] - sums[self.bounds[:-1]]


def pack_sequences(
    lengths: Sequence[int] | np.ndarray,
    capacity: int,
    *,
    method: Fit | str = Fit.BEST,
    window: int | None = None,
    overflow: Overflow | str = Overflow.TRUNCATE,
) -> Packing:
    """Pack samples of ``lengths`` tokens (one per sample, in stream order) into sequences of at
    most ``capacity`` tokens by ``method`` ("first_fit", "best_fit" or "best_fit_decreasing"),
    with at most ``window`` sequences open at once (None: no bound). A sample longer than
    ``capacity`` is truncated, split into pieces or dropped by ``overflow``."""
    method = as_enum(Fit, "method", method)
    overflow = as_enum(Overflow, "overflow", overflow)
    if not _is_int(capacity) or capacity < 1:
        raise ConfigError(f"capacity must be a positive number of tokens, got {capacity!r}")
    if window is not None and (not _is_int(window) or window < 1):
        raise ConfigError(f"window must be None or a positive number of sequences, got {window!r}")
    capacity = int(capacity)
    lengths = _as_lengths(lengths)
    index, offset, tokens, counts = _entries(lengths, capacity, overflow)
    if method is Fit.BEST_DECREASING:
        longest = np.argsort(-tokens, kind="stable")
        seq_list, num_seqs = _best_fit(tokens[longest].tolist(), capacity, window)
        seq_of = np.empty(len(tokens), dtype=np.int64)
        seq_of[longest] = seq_list
    else:
        fit = _best_fit if method is Fit.BEST else _first_fit
        seq_list, num_seqs = fit(tokens.tolist(), capacity, window)
        seq_of = np.asarray(seq_list, dtype=np.int64)
    order = np.argsort(seq_of, kind="stable")  # each sequence's entries in stream order
    bounds = np.zeros(num_seqs + 1, dtype=np.int64)
    np.cumsum(np.bincount(seq_of, minlength=num_seqs), out=bounds[1:])
    used = int(tokens.sum())
    arrays = [index[order], offset[order], tokens[order], bounds]
    for a in arrays:
        a.setflags(write=False)
    return Packing(
        capacity,
        *arrays,
        used_tokens=used,
        padded_tokens=num_seqs * capacity - used,
        **counts,
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _as_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ConfigError(
            f"lengths must be one token count per sample (1-D), got shape {arr.shape}"
        )
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise ConfigError(f"lengths must be integer token counts, got dtype {arr.dtype}")
    bad = np.flatnonzero(arr < 1)
    if bad.size:
        i = int(bad[0])
        raise ConfigError(f"lengths[{i}]={int(arr[i])}: every sample needs at least 1 token")
    return arr.astype(np.int64)


def _entries(
    lengths: np.ndarray, capacity: int, overflow: Overflow
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """The stream's entries (index, offset, tokens), in stream order, and the overflow counts."""
    over = lengths > capacity
    n_over = int(over.sum())
    if overflow is Overflow.DROP:
        index = np.flatnonzero(~over).astype(np.int64)
        lost = int(lengths[over].sum())
        return index, np.zeros_like(index), lengths[index], {"dropped": n_over, "lost_tokens": lost}
    if overflow is Overflow.TRUNCATE:
        index = np.arange(len(lengths), dtype=np.int64)
        lost = int((lengths[over] - capacity).sum())
        tokens = np.minimum(lengths, capacity)
        return index, np.zeros_like(index), tokens, {"truncated": n_over, "lost_tokens": lost}
    pieces = -(-lengths // capacity)
    index = np.repeat(np.arange(len(lengths), dtype=np.int64), pieces)
    first = np.repeat(np.cumsum(pieces) - pieces, pieces)
    offset = (np.arange(len(index), dtype=np.int64) - first) * capacity
    tokens = np.minimum(capacity, lengths[index] - offset)
    return index, offset, tokens, {"split": n_over}


class _Rooms:
    """The open sequences by room left: bit r of ``bits`` is set while some open sequence has
    room r, and ``heaps[r]`` holds their ids (lowest first). An id leaves a room lazily
    (:meth:`leave`): its stale heap entry is skipped when popped, since room only shrinks."""

    def __init__(self) -> None:
        self.bits = 0
        self.count: dict[int, int] = {}
        self.heaps: dict[int, list[int]] = {}

    def add(self, s: int, room: int) -> None:
        n = self.count.get(room, 0)
        if n == 0:
            self.bits |= 1 << room
            self.heaps[room] = [s]
        else:
            heapq.heappush(self.heaps[room], s)
        self.count[room] = n + 1

    def leave(self, room: int) -> None:
        n = self.count[room] - 1
        self.count[room] = n
        if n == 0:
            self.bits &= ~(1 << room)
            del self.heaps[room]

    def smallest(self, need: int) -> int:
        """The least room >= need that an open sequence has, or -1."""
        m = self.bits >> need
        return need + (m & -m).bit_length() - 1 if m else -1

    def pop(self, room: int, room_of: list[int]) -> int:
        """The lowest id with ``room``, taken out of it."""
        heap = self.heaps[room]
        s = heapq.heappop(heap)
        while room_of[s] != room:
            s = heapq.heappop(heap)
        self.leave(room)
        return s


class _FirstTree:
    """A max tree over sequence ids (the leaves: room left, 0 once closed), grown by doubling:
    the first id with room >= t in one descent."""

    def __init__(self) -> None:
        self.size = 1024
        self.tree = [0] * (2 * self.size)

    def set(self, s: int, room: int) -> None:
        if s >= self.size:
            self._grow()
        tree = self.tree
        j = s + self.size
        tree[j] = room
        j >>= 1
        while j:
            m = max(tree[2 * j], tree[2 * j + 1])
            if tree[j] == m:
                break
            tree[j] = m
            j >>= 1

    def first(self, need: int) -> int:
        tree = self.tree
        if tree[1] < need:
            return -1
        j, size = 1, self.size
        while j < size:
            j = 2 * j if tree[2 * j] >= need else 2 * j + 1
        return j - size

    def _grow(self) -> None:
        old, size = self.tree, self.size * 2
        tree = [0] * (2 * size)
        tree[size : size + self.size] = old[self.size :]
        for j in range(size - 1, 0, -1):
            tree[j] = max(tree[2 * j], tree[2 * j + 1])
        self.tree, self.size = tree, size


def _best_fit(tokens: list[int], capacity: int, window: int | None) -> tuple[list[int], int]:
    rooms, room_of, seq_of, open_now = _Rooms(), [], [0] * len(tokens), 0
    for k, t in enumerate(tokens):
        r = rooms.smallest(t)
        if r >= 0:
            s = rooms.pop(r, room_of)
        else:
            if open_now == window:  # close the least-room sequence first
                room_of[rooms.pop(rooms.smallest(1), room_of)] = 0
                open_now -= 1
            s, r = len(room_of), capacity
            room_of.append(capacity)
            open_now += 1
        left = r - t
        room_of[s] = left
        if left:
            rooms.add(s, left)
        else:
            open_now -= 1
        seq_of[k] = s
    return seq_of, len(room_of)


def _first_fit(tokens: list[int], capacity: int, window: int | None) -> tuple[list[int], int]:
    # _Rooms only serves the window's closing rule, so an unbounded window skips it
    rooms = _Rooms() if window is not None else None
    tree, room_of, seq_of, open_now = _FirstTree(), [], [0] * len(tokens), 0
    for k, t in enumerate(tokens):
        s = tree.first(t)
        if s >= 0:
            r = room_of[s]
            if rooms is not None:
                rooms.leave(r)
        else:
            if open_now == window and rooms is not None:  # close the least-room sequence first
                c = rooms.pop(rooms.smallest(1), room_of)
                room_of[c] = 0
                tree.set(c, 0)
                open_now -= 1
            s, r = len(room_of), capacity
            room_of.append(capacity)
            open_now += 1
        left = r - t
        room_of[s] = left
        tree.set(s, left)
        if not left:
            open_now -= 1
        elif rooms is not None:
            rooms.add(s, left)
        seq_of[k] = s
    return seq_of, len(room_of)
