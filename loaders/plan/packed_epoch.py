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
  with empty rows.
- **Workers.** The rank's batches (its windows' in order, then padding) are dealt a batch at a
  time: batch i to worker i % k (k = max(1, num_workers)), so every worker has work however few
  the windows, and torch's round robin over the workers delivers them in plan order: the
  batches and their order are the same for any number of workers. A worker reads, of each
  window, the samples of its batches (:mod:`loaders.plan.packed_batches`).
- **Rows.** A row is a tuple of entries (unit id, token offset, token count); ``()`` is an
  empty row: no tokens, all of it padding, masked. A padding batch is ``rows`` empty rows
  (the types: :mod:`loaders.plan.packed_batches`).
- **Equal steps.** Every rank has ``num_batches`` = the most batches any rank's windows make
  (each rank's count computed from the lengths). A rank with fewer gets padding batches after
  its real ones, dealt like them (:attr:`PackedWorker.padding`).
- **Resume.** See :func:`plan_packed_resumed`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from loaders.plan.epoch import PlanData, as_mixture
from loaders.plan.epoch_spec import EpochSpec, Topology
from loaders.plan.mixture import Mixture
from loaders.plan.packed_batches import (
    Batch,
    Entry,
    PackedRankPlan,
    PackedWindow,
    PackedWorker,
    PackSpec,
    Row,
    deal,
    empty_batch,
)
from loaders.plan.packed_units import (
    Units,
    concat_units,
    fresh_shares,
    shard_starts,
    spread_units,
    unit_id,
    unit_sample,
)
from loaders.plan.packing import Fit, pack_sequences
from loaders.plan.resume import Segment
from loaders.plan.shuffle import block_permutation
from wdstool.base.errors import ConfigError


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


def _pack_window(units: Units, start: int, index: int, seed: int | None, pack: PackSpec) -> _Packed:
    n = len(units)
    order = block_permutation(seed, n) if seed is not None else np.arange(n)
    p = pack_sequences(
        units.tokens[order],
        pack.capacity,
        method=pack.method,
        window=None if pack.method is Fit.BEST_DECREASING else pack.open_sequences,
        overflow=pack.overflow,
    )
    unit, offset, tokens, bounds = order[p.index], p.offset, p.tokens, p.bounds
    if pack.method is Fit.BEST_DECREASING and seed is not None and p.num_sequences > 1:
        # sorted, the sequences open longest sample first: put them in a seeded order
        perm = block_permutation(seed ^ 0x5EC5, p.num_sequences)
        take = np.concatenate([np.arange(bounds[s], bounds[s + 1]) for s in perm])
        unit, offset, tokens = unit[take], offset[take], tokens[take]
        bounds = np.concatenate([[0], np.cumsum(np.diff(bounds)[perm])])
    offset = units.offsets[unit] + offset
    entries = list(zip(units.ids[unit].tolist(), offset.tolist(), tokens.tolist(), strict=True))
    seqs = [tuple(entries[a:b]) for a, b in itertools.pairwise(bounds.tolist())]
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
    return _Packed(window, unit, offset, tokens, bounds)


class _Segment:
    """One segment of an epoch: every rank's share (a stream of units), packed window by
    window on demand; the plan of any rank; what a rank had not delivered after some batches."""

    def __init__(
        self, shares: list[Units], spec: EpochSpec, pack: PackSpec, generation: int
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
        windows = tuple(p.window for p in self.packed(topo.rank))
        return PackedRankPlan(
            epoch=self.spec.epoch,
            rank=topo.rank,
            world_size=topo.world_size,
            num_workers=topo.num_workers,
            rows=self.pack.rows,
            capacity=self.pack.capacity,
            num_batches=self.num_batches,
            workers=deal(windows, self.num_batches, topo.streams, self.pack.rows),
            generation=self.generation,
            windows=windows,
        )

    def left(self, topo: Topology, batches: int) -> Units:
        """What rank ``topo.rank`` had not delivered after ``batches`` batches, in share order
        (window by window). The rank delivers its batches in plan order (they are dealt to its
        workers in turn), so the first ``batches`` of its windows' batches are delivered. A
        window is started once a batch at or after its first was delivered (for a window of
        no batches: one after it). A window not started is carried whole (its over-long
        samples too: they are dropped or truncated, and counted, where it is re-planned); of
        a started one, the undelivered tokens of each sample, one unit per contiguous range
        (its ``dropped`` samples stay counted here)."""
        share, rows = self.shares[topo.rank], self.pack.rows
        parts: list[Units] = []
        first = 0  # the rank's index of the window's first batch
        for p in self.packed(topo.rank):
            win, n = p.window, len(p.window.batches)
            if batches <= first:  # not started
                parts.append(share.cut(win.start, win.start + len(win.ids)))
            elif batches < first + n:
                parts.append(_undelivered(p, share, (batches - first) * rows))
            first += n
        return concat_units(parts)


def _undelivered(p: _Packed, share: Units, seqs: int) -> Units:
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
    return Units(ids, off[at], np.add.reduceat(tok, at) if len(at) else tok[:0])


@dataclass(frozen=True, eq=False)
class PackedData:
    """What a packed plan packs: the samples of one source's shards or of a weighted
    :class:`Mixture` (``mixture``), and every sample's token count (``lengths``: the sources'
    one after another, in global sample id order). Built by :meth:`of`, which checks them once."""

    mixture: Mixture
    lengths: np.ndarray  # int64, one count >= 1 per sample

    @classmethod
    def of(cls, data: PlanData, lengths: np.ndarray | Sequence[int]) -> PackedData:
        """``data`` (shard sizes or a mixture) and its lengths, checked: one integer count
        >= 1 per sample of every source, the sources one after another."""
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
        return cls(mix, arr.astype(np.int64))


def plan_packed(
    data: PackedData, spec: EpochSpec, pack: PackSpec, topology: Topology
) -> PackedRankPlan:
    """The packed plan of rank ``topology.rank`` for the fresh epoch ``spec.epoch`` of
    ``data`` (its samples and their tokens)."""
    shares = fresh_shares(data.mixture, data.lengths, spec, topology.world_size)
    return _Segment(shares, spec, pack, 0).plan(topology)


def plan_packed_resumed(
    data: PackedData,
    history: Sequence[Segment],
    spec: EpochSpec,
    pack: PackSpec,
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
        return plan_packed(data, spec, pack, topology)
    mix, lens = data.mixture, data.lengths
    left = concat_units([])
    for g, seg in enumerate(history):
        shares = (
            fresh_shares(mix, lens, spec, seg.world_size)
            if g == 0
            else spread_units(left, seg.world_size)
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
        left = concat_units(
            [
                past.left(Topology(r, seg.world_size, seg.num_workers), seg.batches)
                for r in range(seg.world_size)
            ]
        )
    shares = spread_units(left, topology.world_size)
    return _Segment(shares, spec, pack, len(history)).plan(topology)


__all__ = [
    "Batch",
    "Entry",
    "PackSpec",
    "PackedData",
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
