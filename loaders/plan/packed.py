"""The exact plan of packed batches: one rank's batches of ``rows`` sequences of at most
``capacity`` tokens, for a fresh or a resumed epoch of one source or a weighted mixture
(docs/design/packing.md, "The exact planner", points 2-5). Pure: every sample's token count is
known ahead (``lengths``, indexed by global sample id = earlier sources' samples + earlier
shards' sizes + index in its shard: the sources' lengths one after another).

- **Units.** What is packed is a unit: one planned reading of a sample. A weighted source may be
  read more than once an epoch (``Slice.rep``: each reading its own augmentation draw), so a
  unit is (sample id, rep), numbered ``rep * samples + sample id`` (:func:`unit_id`; ``samples``:
  the mixture's samples): a sample's first reading is its sample id, so one source read once is
  planned in sample ids as before.
- **Shares.** A rank's share is its items of the epoch (``EpochItems.rank_items`` under
  uneven="mask", padding removed, a mixture's interleave of its sources listed sample by
  sample) as units, in read order: near-equal (they differ by at most one sample), each
  source's units numbering the mixture plan's share of it. ``spec.batch_size``, ``uneven``,
  ``drop_last`` and ``shuffle_buffer`` do not apply: every unit is planned exactly once.
- **Windows.** The share is cut into windows of ``pack.window`` consecutive samples. A window is
  read in share order (:attr:`PackedWindow.ids`), put in an order seeded by (seed, epoch,
  generation, rank, window) when ``spec.shuffle`` (no worker in the seed), packed by
  :func:`pack_sequences`, and its sequences cut into batches of ``rows``, the last one filled
  with empty rows. Window g goes to worker g % k (k = max(1, num_workers)): the batches are the
  same for any number of workers; only their order differs.
- **Rows.** A row is a tuple of entries (unit id, token offset, token count); ``()`` is an
  empty row: no tokens, all of it padding, masked. A padding batch is ``rows`` empty rows
  (the types: :mod:`loaders.plan.packed_batches`).
- **Equal steps.** Every rank has ``num_batches`` = the most batches any rank's windows make
  (each rank's count computed from the lengths). A rank with fewer gets padding batches: the
  j-th goes to worker j % k, after that worker's real batches (:attr:`PackedWorker.padding`).
- **Resume.** See :func:`plan_packed_resumed`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from loaders.plan.epoch import EpochItems, PlanData, as_mixture
from loaders.plan.interleave import sources_in_order
from loaders.plan.items import Item, Mix, Slice
from loaders.plan.mixture import Mixture
from loaders.plan.packed_batches import (
    Batch,
    Entry,
    PackedRankPlan,
    PackedWindow,
    PackedWorker,
    PackSpec,
    Row,
    empty_batch,
)
from loaders.plan.packing import pack_sequences
from loaders.plan.resume import Segment
from loaders.plan.shuffle import block_permutation
from loaders.plan.spec import EpochSpec, Topology, Uneven
from wdstool.base.errors import ConfigError


def unit_id(sample: Any, rep: Any, samples: int) -> Any:
    """The unit of the ``rep``-th reading of sample ``sample`` this epoch (``samples``: the
    mixture's samples, all sources)."""
    return rep * samples + sample


def unit_sample(unit: Any, samples: int) -> tuple[Any, Any]:
    """(sample id, rep) of a unit (or an array of them): :func:`unit_id` undone."""
    rep, sample = divmod(unit, samples)
    return sample, rep


@dataclass(frozen=True, eq=False)
class _Units:
    """A stream to pack: entry i is tokens [offsets[i], offsets[i] + tokens[i]) of unit ids[i]
    (:func:`unit_id`: a whole sample's reading in a fresh epoch; what is left of one in a
    resumed one). The unit id carries the sample's source and rep through every segment."""

    ids: np.ndarray
    offsets: np.ndarray
    tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def cut(self, a: int, b: int) -> _Units:
        return _Units(self.ids[a:b], self.offsets[a:b], self.tokens[a:b])


def _concat(parts: Sequence[_Units]) -> _Units:
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return _Units(empty, empty, empty)
    return _Units(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))


_FIELDS = ("ids", "offsets", "tokens")


@dataclass(frozen=True, eq=False)
class _Packed:
    """A packed window and its entries as arrays: each entry's unit (position in the window),
    absolute token offset and count; sequence s is entries bounds[s]:bounds[s + 1]."""

    window: PackedWindow
    unit: np.ndarray
    offset: np.ndarray
    tokens: np.ndarray
    bounds: np.ndarray


def _window_seed(spec: EpochSpec, generation: int, rank: int, window: int) -> int:
    entropy = [spec.seed, spec.epoch, generation, rank, window, 0xAC3D]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0]) >> 1


def _pack_window(
    units: _Units, start: int, index: int, seed: int | None, pack: PackSpec
) -> _Packed:
    n = len(units)
    order = block_permutation(seed, n) if seed is not None else np.arange(n)
    p = pack_sequences(
        units.tokens[order],
        pack.capacity,
        method=pack.method,
        window=pack.open_sequences,
        overflow=pack.overflow,
    )
    unit = order[p.index]
    offset = units.offsets[unit] + p.offset
    entries = list(zip(units.ids[unit].tolist(), offset.tolist(), p.tokens.tolist(), strict=True))
    bounds = p.bounds.tolist()
    seqs = [tuple(entries[a:b]) for a, b in itertools.pairwise(bounds)]
    rows = pack.rows
    batches = tuple(
        tuple(seqs[i : i + rows]) + ((),) * max(0, i + rows - len(seqs))
        for i in range(0, len(seqs), rows)
    )
    dropped = units.ids[units.tokens > pack.capacity] if p.dropped else units.ids[:0]
    window = PackedWindow(
        index=index,
        start=start,
        ids=tuple(units.ids.tolist()),
        batches=batches,
        dropped=tuple(dropped.tolist()),
        truncated=p.truncated,
        split=p.split,
    )
    return _Packed(window, unit, offset, p.tokens, p.bounds)


class _Segment:
    """One segment of an epoch: every rank's share (a stream of units), packed window by
    window on demand; the plan of any rank; what a rank had not delivered after some batches."""

    def __init__(
        self, shares: list[_Units], spec: EpochSpec, pack: PackSpec, generation: int
    ) -> None:
        self.shares, self.spec, self.pack, self.generation = shares, spec, pack, generation
        self._packed: dict[int, list[_Packed]] = {}

    def packed(self, rank: int) -> list[_Packed]:
        if rank not in self._packed:
            share, size, out = self.shares[rank], self.pack.window, []
            for g, a in enumerate(range(0, len(share), size)):
                seed = (
                    _window_seed(self.spec, self.generation, rank, g) if self.spec.shuffle else None
                )
                out.append(_pack_window(share.cut(a, a + size), a, g, seed, self.pack))
            self._packed[rank] = out
        return self._packed[rank]

    def own_batches(self, rank: int) -> int:
        return sum(len(p.window.batches) for p in self.packed(rank))

    @cached_property
    def num_batches(self) -> int:
        return max(self.own_batches(r) for r in range(len(self.shares)))

    def plan(self, topo: Topology) -> PackedRankPlan:
        k, rows = topo.streams, self.pack.rows
        windows = [p.window for p in self.packed(topo.rank)]
        pad = self.num_batches - self.own_batches(topo.rank)
        workers = tuple(
            PackedWorker(
                worker=w,
                rows=rows,
                windows=tuple(windows[w::k]),
                padding=pad // k + (1 if w < pad % k else 0),
            )
            for w in range(k)
        )
        return PackedRankPlan(
            epoch=self.spec.epoch,
            rank=topo.rank,
            world_size=topo.world_size,
            num_workers=topo.num_workers,
            rows=rows,
            capacity=self.pack.capacity,
            num_batches=self.num_batches,
            workers=workers,
            generation=self.generation,
        )

    def left(self, topo: Topology, batches: int) -> _Units:
        """What rank ``topo.rank`` had not delivered after ``batches`` batches, in share order
        (window by window). A window is started once its worker delivered a batch at or after
        the window's first (for a window of no batches: one after it). A window not started
        is carried whole (its over-long samples too: they are dropped or truncated, and
        counted, where it is re-planned); of a started one, the undelivered tokens of each
        sample, one unit per contiguous range (its ``dropped`` samples stay counted here)."""
        plan, share, rows = self.plan(topo), self.shares[topo.rank], self.pack.rows
        packed = self.packed(topo.rank)
        parts: list[tuple[int, _Units]] = []
        for wp, done in zip(plan.workers, plan.delivered(batches), strict=True):
            first = 0  # the worker's index of the window's first batch
            for win in wp.windows:
                n = len(win.batches)
                if done <= first:  # not started
                    parts.append((win.index, share.cut(win.start, win.start + len(win.ids))))
                elif done < first + n:
                    units = _undelivered(packed[win.index], share, (done - first) * rows)
                    parts.append((win.index, units))
                first += n
        return _concat([u for _, u in sorted(parts, key=lambda p: p[0])])


def _undelivered(p: _Packed, share: _Units, seqs: int) -> _Units:
    """The tokens of the sequences after the first ``seqs`` of a packed window, per sample in
    read order, each contiguous range of a sample one unit."""
    e = int(p.bounds[seqs])
    unit, off, tok = p.unit[e:], p.offset[e:], p.tokens[e:]
    order = np.lexsort((off, unit))
    unit, off, tok = unit[order], off[order], tok[order]
    new = np.ones(len(unit), dtype=bool)
    new[1:] = (unit[1:] != unit[:-1]) | (off[1:] != off[:-1] + tok[:-1])
    at = np.flatnonzero(new)
    ids = share.ids[p.window.start + unit[at]]
    return _Units(ids, off[at], np.add.reduceat(tok, at) if len(at) else tok[:0])


def _checked_lengths(data: PlanData, lengths: np.ndarray) -> tuple[Mixture, np.ndarray]:
    """The mixture of ``data`` and its lengths, checked: one count >= 1 per sample of every
    source, the sources one after another."""
    mix = as_mixture(data)
    total = mix.num_samples
    arr = np.asarray(lengths)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or len(arr) != total:
        of = "" if len(mix.sources) == 1 else f" of the {len(mix.sources)} sources, in order"
        raise ConfigError(
            f"lengths must be one integer token count per sample{of} ({total}), got "
            f"{arr.dtype} of shape {arr.shape}"
        )
    bad = np.flatnonzero(arr < 1)
    if bad.size:
        raise ConfigError(f"lengths[{int(bad[0])}]={int(arr[bad[0]])}: a sample has >= 1 token")
    return mix, arr.astype(np.int64)


def shard_starts(mix: Mixture) -> list[np.ndarray]:
    """Each source's shards' first global sample ids (the sources one after another)."""
    out, at = [], 0
    for src in mix.sources:
        sizes = np.asarray(src.sizes, dtype=np.int64)
        out.append(at + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64))
        at += int(sizes.sum())
    return out


def _expand(items: Sequence[Item], starts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The global sample ids and reps of ``items``, sample by sample in read order (a mix's
    sources interleaved as ``loaders.read`` reads them)."""
    ids: list[np.ndarray] = []
    reps: list[np.ndarray] = []
    for it in items:
        if isinstance(it, Slice):
            a = int(starts[it.source][it.shard]) + it.start
            ids.append(np.arange(a, a + len(it), dtype=np.int64))
            reps.append(np.full(len(it), it.rep, dtype=np.int64))
        elif isinstance(it, Mix):
            order = np.fromiter(
                sources_in_order(it.spans, it.lo, it.hi), dtype=np.int64, count=len(it)
            )
            got_ids, got_reps = np.empty(len(it), np.int64), np.empty(len(it), np.int64)
            for i, part in enumerate(it.per_source()):
                at = order == i
                got_ids[at], got_reps[at] = _expand(part, starts)
            ids.append(got_ids)
            reps.append(got_reps)
        else:
            raise ConfigError(f"internal error: a fresh epoch's item is a {type(it).__name__}")
    if not ids:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return np.concatenate(ids), np.concatenate(reps)


def _fresh(mix: Mixture, lengths: np.ndarray, spec: EpochSpec, world_size: int) -> list[_Units]:
    """Every rank's share of a fresh epoch, as units of whole samples."""
    starts, total = shard_starts(mix), mix.num_samples
    items = EpochItems(mix, spec)
    shares = []
    for r in range(world_size):
        share = items.rank_items(Topology(r, world_size), Uneven.MASK).items
        sample, rep = _expand([it for it in share if not it.pad], starts)
        ids = unit_id(sample, rep, total)
        shares.append(_Units(ids, np.zeros_like(ids), lengths[sample]))
    return shares


def _spread(units: _Units, world_size: int) -> list[_Units]:
    """Contiguous near-equal shares of ``units``, rank by rank."""
    q, r = divmod(len(units), world_size)
    cuts = [i * q + min(i, r) for i in range(world_size + 1)]
    return [units.cut(a, b) for a, b in itertools.pairwise(cuts)]


def plan_packed(
    data: PlanData,
    lengths: np.ndarray | Sequence[int],
    spec: EpochSpec,
    pack: PackSpec,
    topology: Topology,
) -> PackedRankPlan:
    """The packed plan of rank ``topology.rank`` for the fresh epoch ``spec.epoch`` of ``data``
    (one source's shard sizes, or a :class:`Mixture`), ``lengths`` its samples' tokens."""
    mix, lens = _checked_lengths(data, np.asarray(lengths))
    shares = _fresh(mix, lens, spec, topology.world_size)
    return _Segment(shares, spec, pack, 0).plan(topology)


def plan_packed_resumed(
    data: PlanData,
    lengths: np.ndarray | Sequence[int],
    spec: EpochSpec,
    pack: PackSpec,
    history: Sequence[Segment],
    topology: Topology,
) -> PackedRankPlan:
    """The packed plan of one rank for the rest of an epoch interrupted after ``history``:
    segments (world size, workers, ``batch_size`` = that segment's rows, batches delivered on
    every rank) as the state records them (consecutive segments differ in topology or rows).

    The last segment's topology and rows again: that segment's plan, each worker skipping what
    it delivered (``skip``, ``resume_at``), so the loader delivers exactly the batches the
    uninterrupted run would have delivered next. Otherwise every rank's undelivered units (each
    keeps its sample's source and rep: its unit id) after each segment (``_Segment.left``: untouched windows whole; of a partly delivered window,
    the samples of its undelivered sequences, and of a split sample whose pieces were partly
    delivered, its undelivered tokens as one unit that is packed, and split again, as a
    sample), rank by rank in share order, are the next segment's stream: contiguous near-equal
    shares, windows, packing and equal steps as in a fresh epoch, seeded with the segment's
    generation. Every token of the epoch is delivered once. A dropped (or truncated) sample
    is counted in the segment whose window, holding it, had a batch delivered (the last
    segment: all its windows)."""
    if not history:
        return plan_packed(data, lengths, spec, pack, topology)
    mix, lens = _checked_lengths(data, np.asarray(lengths))
    left = _concat([])
    for g, seg in enumerate(history):
        shares = (
            _fresh(mix, lens, spec, seg.world_size) if g == 0 else _spread(left, seg.world_size)
        )
        past = _Segment(shares, spec, replace(pack, rows=seg.batch_size), g)
        if not 0 <= seg.batches <= past.num_batches:
            raise ConfigError(
                f"the state says {seg.batches} batches were delivered, but that segment has "
                f"{past.num_batches} on each rank"
            )
        same = (seg.world_size, seg.num_workers, seg.batch_size) == (
            topology.world_size,
            topology.num_workers,
            pack.rows,
        )
        if g == len(history) - 1 and same:
            plan = past.plan(topology)
            skips = plan.delivered(seg.batches)
            workers = tuple(replace(w, skip=s) for w, s in zip(plan.workers, skips, strict=True))
            return replace(plan, workers=workers, resume_at=seg.batches)
        left = _concat(
            [
                past.left(Topology(r, seg.world_size, seg.num_workers), seg.batches)
                for r in range(seg.world_size)
            ]
        )
    shares = _spread(left, topology.world_size)
    return _Segment(shares, spec, pack, len(history)).plan(topology)


__all__ = [
    "Batch",
    "Entry",
    "PackSpec",
    "PackedRankPlan",
    "PackedWindow",
    "PackedWorker",
    "Row",
    "empty_batch",
    "plan_packed",
    "plan_packed_resumed",
    "shard_starts",
    "unit_id",
    "unit_sample",
]
