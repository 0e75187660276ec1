"""The plan of one rank for one fresh epoch, of one source or a mixture.

Each source's epoch items (``loaders.plan.mixture``: passes in seeded shard orders, rotated,
plus the window of a subsampled or over-weighted source) are cut into one contiguous span per
rank; spans are sized so that every rank's total is the same within one sample (extras of each
source go to the ranks after those of the previous source). A rank reads its spans of all
sources interleaved evenly (:class:`loaders.plan.items.Mix`). Its share is split into contiguous
chunks, one per worker, sized so that batching inside each worker and torch's in-order round
robin over workers yield exactly ``num_batches`` batches, all full but the last.
Cost: O(shards + this rank's slices); per-sample lists are never built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from loaders.plan.epoch_spec import EpochSpec, Split, Topology, Uneven, as_uneven, k_of
from loaders.plan.items import Item, Mix, Slice, as_pad, merge_slices, take_items
from loaders.plan.mixture import MixSource, Mixture, SourceEpoch
from loaders.plan.shuffle import worker_seed
from wdstool.base.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class WorkerPlan:
    worker: int
    slices: tuple[Slice, ...]
    num_samples: int
    num_batches: int
    last_batch_size: int
    shuffle_seed: int | None
    pieces: tuple[Item, ...] = ()  # a resumed epoch's stream (then ``slices`` is empty)
    skip: int = 0  # outputs already delivered before a same-topology resume

    @property
    def items(self) -> tuple[Item, ...]:
        return self.pieces or self.slices

    def batch_sizes(self, batch_size: int) -> list[int]:
        """The sizes of the batches this worker still delivers (all full but the last)."""
        sizes = [batch_size] * self.num_batches
        if sizes:
            sizes[-1] = self.last_batch_size
        return sizes[self.first_batch(batch_size) :]

    def first_batch(self, batch_size: int) -> int:
        """Index of the first batch this worker still delivers: ``skip`` is a whole number of
        batches, or everything."""
        return self.num_batches if self.skip >= self.num_samples else self.skip // batch_size


@dataclass(frozen=True, kw_only=True)
class RankPlan:
    epoch: int
    rank: int
    world_size: int
    num_workers: int
    batch_size: int
    num_samples: int
    num_batches: int
    workers: tuple[WorkerPlan, ...]
    resume_at: int = 0  # batches of this plan already delivered (same-topology resume)
    num_real: int = -1  # samples that are not padding (-1: all of num_samples)

    @property
    def remaining_batches(self) -> int:
        return self.num_batches - self.resume_at

    @property
    def rotation(self) -> int:
        """DataLoader worker i serves plan worker (i + rotation) % k: torch's round robin always
        starts at worker 0, while a resumed epoch continues at worker resume_at % k."""
        return self.resume_at % k_of(self.num_workers)

    def loader_order(self) -> list[tuple[int, int]]:
        """(plan worker, batch index) in the order a DataLoader delivers the remaining batches:
        round robin over its workers from 0, skipping exhausted ones (== batch_order() after
        resume_at)."""
        queues = [range(wp.first_batch(self.batch_size), wp.num_batches) for wp in self.workers]
        return round_robin(queues, self.rotation, k_of(self.num_workers))

    def batch_order(self) -> list[tuple[int, int]]:
        """(worker, batch index in that worker) in the order torch's DataLoader delivers them:
        in-order round robin over workers, skipping exhausted ones."""
        order = []
        rounds = max((w.num_batches for w in self.workers), default=0)
        for b in range(rounds):
            for w in self.workers:
                if b < w.num_batches:
                    order.append((w.worker, b))
        return order


def round_robin(queues: Sequence[range], start: int, k: int) -> list[tuple[int, int]]:
    """(worker, batch) as torch's DataLoader takes the workers' remaining batches (``queues``):
    round robin over its ``k`` workers, DataLoader worker i serving plan worker
    (i + ``start``) % k, skipping exhausted ones."""
    pending = [list(q) for q in queues]
    order: list[tuple[int, int]] = []
    active = [(i + start) % k for i in range(k)]
    while active:
        for w in list(active):
            if pending[w]:
                order.append((w, pending[w].pop(0)))
            if not pending[w]:
                active.remove(w)
    return order


def samples_per_rank(
    total_samples: int, *, world_size: int, uneven: Uneven | str = "pad", slack: int = 0
) -> int:
    """Samples each rank yields an epoch: ``ceil(N/W)`` (``"pad"``, ``"mask"``) or
    ``floor(N/W)`` (``"drop"``); ``slack``: how far whole-shard shares may stray from that
    (:func:`shard_slack`), added (taken, for ``"drop"``), so that every rank yields the same."""
    q, r = divmod(total_samples, world_size)
    if as_uneven(uneven) is Uneven.DROP:
        return max(0, q - slack)
    return q + (1 if r else 0) + slack


def shard_slack(mix: Mixture) -> int:
    """How many samples a rank's whole-shard share (``split="shards"``) may hold more or
    fewer than its share of samples: each source's cuts move up to its largest shard less
    one sample. A pure function of the sizes: ``len(loader)`` stays the same every epoch."""
    return sum(
        max(s.sizes) - 1 for s, share in zip(mix.sources, mix.shares(), strict=True) if share
    )


def num_batches(
    total_samples: int,
    *,
    world_size: int,
    batch_size: int,
    uneven: Uneven | str = "pad",
    drop_last: bool = False,
) -> int:
    """``len(loader)``: identical on every rank, O(1)."""
    s = samples_per_rank(total_samples, world_size=world_size, uneven=uneven)
    return batches_of(s, batch_size, drop_last)


def batches_of(samples: int, batch_size: int, drop_last: bool = False) -> int:
    """Batches of ``samples`` (a rank's, :func:`samples_per_rank`): full ones, and a last
    partial one unless ``drop_last``."""
    nb, rem = divmod(samples, batch_size)
    return nb + (1 if rem and not drop_last else 0)


PlanData = Sequence[int] | Mixture


def as_mixture(data: PlanData) -> Mixture:
    """A list of shard sizes is one source, whole, once per epoch."""
    if isinstance(data, Mixture):
        return data
    sizes = np.asarray(data, dtype=np.int64)
    if sizes.ndim != 1 or (sizes.size and sizes.min() < 0):
        raise ConfigError("shard sizes must be non-negative sample counts")
    if int(sizes.sum()) <= 0:
        raise ConfigError("the dataset has no samples")
    return Mixture((MixSource(tuple(sizes.tolist())),))


def check_data(n: int, spec: EpochSpec, topo: Topology) -> None:
    """The one rule that needs the data: under uneven="drop" every rank gets something."""
    if spec.uneven is Uneven.DROP and n < topo.world_size:
        raise ConfigError(
            f"{n} samples are fewer than {topo.world_size} ranks: with uneven='drop' every rank "
            "would get nothing; use uneven='pad'"
        )


def check_split(mix: Mixture, spec: EpochSpec, topo: Topology) -> None:
    """Under split="shards" every rank gets a shard, and something under uneven="drop"."""
    if spec.split is not Split.SHARDS:
        return
    shards = sum(len(s.sizes) for s in mix.sources)
    if shards < topo.world_size:
        raise ConfigError(
            f"split='shards' gives each rank whole shards: {shards} shards cannot serve "
            f"{topo.world_size} ranks; use split='samples'"
        )
    slack = shard_slack(mix)
    if not samples_per_rank(mix.total, world_size=topo.world_size, uneven=spec.uneven, slack=slack):
        raise ConfigError(
            f"split='shards' with uneven='drop' leaves a rank nothing ({mix.total} samples, "
            f"{topo.world_size} ranks, shards of up to {slack + 1}); use uneven='pad' or 'mask'"
        )


class RankShare(NamedTuple):
    """A rank's items for an epoch, its sample count (padding included) and its real samples."""

    items: list[Item]
    total: int
    real: int


class EpochItems:
    """Every source's items for one epoch (computed once, shared by the plans of all ranks)."""

    def __init__(self, mix: Mixture, spec: EpochSpec) -> None:
        seed, epoch, shuffle = spec.seed, spec.epoch, spec.shuffle
        self.whole = spec.split is Split.SHARDS
        self.slack = shard_slack(mix) if self.whole else 0
        self.shares = mix.shares()
        cursors = mix.cursors_at(epoch)
        self.total = sum(self.shares)
        self.sources = [
            SourceEpoch(
                src,
                i,
                share,
                cursor,
                seed=seed,
                epoch=epoch,
                shuffle=shuffle,
                repeats=mix.repeats,
                whole=self.whole,
            )
            if share
            else None
            for i, (src, share, cursor) in enumerate(
                zip(mix.sources, self.shares, cursors, strict=True)
            )
        ]

    def rank_items(self, topo: Topology, uneven: Uneven) -> RankShare:
        """A rank's items, its sample count (padding included) and its real samples. Under
        ``split="shards"`` each source's span is moved on, at both ends, to where a shard
        starts: ranks read whole shards, and pad up to the same count."""
        rank, world_size = topo.rank, topo.world_size
        spans, begins, offset = [], [], 0
        for i, share in enumerate(self.shares):
            q, r = divmod(share, world_size)
            first = offset % world_size  # this source's extras go to ranks first, first+1, ...
            span = q + (1 if (rank - first) % world_size < r else 0)
            begin = rank * q + _extras_before(rank, first, r, world_size)
            src = self.sources[i]
            if self.whole and src is not None:
                begin, end = src.shard_start(begin), src.shard_start(begin + span)
                span = end - begin
            spans.append(span)
            begins.append(begin)
            offset += share
        real = sum(spans)
        total = samples_per_rank(self.total, world_size=world_size, uneven=uneven, slack=self.slack)
        keep = min(real, total)
        live = [i for i, s in enumerate(spans) if s]
        if len(live) == 1:
            i = live[0]
            items: list[Item] = list(self.sources[i].take(begins[i], keep))  # type: ignore[union-attr]
        elif live:
            parts = tuple(
                tuple(self.sources[i].take(begins[i], spans[i])) if spans[i] else ()  # type: ignore[union-attr]
                for i in range(len(spans))
            )
            items = take_items([Mix(parts, tuple(spans), 0, real)], 0, keep)
        else:
            items = []
        big = max(range(len(self.shares)), key=lambda i: (self.shares[i], -i))
        left = total - keep  # padding, repeats marked as such: at most one sample, or ...
        if self.whole and real:  # ... up to twice the slack: the rank's own samples again
            own = max(range(len(spans)), key=lambda i: (spans[i], -i))
            while left > 0:
                n = min(left, spans[own])
                items.extend(as_pad(s) for s in self.sources[own].take(begins[own], n))  # type: ignore[union-attr]
                left -= n
        share = self.shares[big]
        at = begins[big] % share if real else rank % share
        while left > 0:
            n = min(left, share - at)
            items.extend(as_pad(s) for s in self.sources[big].take(at, n))  # type: ignore[union-attr]
            left, at = left - n, 0
        return RankShare(items, total, keep)


def _extras_before(rank: int, first: int, count: int, world_size: int) -> int:
    """How many of the ranks first, first+1, ... (``count`` of them, mod ``world_size``) are
    below ``rank``."""
    end = first + count
    if end <= world_size:
        return min(max(rank - first, 0), count)
    return min(rank, end - world_size) + max(rank - first, 0)


def plan_epoch(
    data: PlanData, spec: EpochSpec, topo: Topology, items: EpochItems | None = None
) -> RankPlan:
    """The plan of rank ``topo.rank`` for epoch ``spec.epoch`` (see the module docstring).
    ``data`` is a list of shard sizes (one source) or a :class:`Mixture`; ``items`` reuses an
    epoch's items across the plans of several ranks."""
    mix = as_mixture(data)
    check_data(mix.total, spec, topo)
    check_split(mix, spec, topo)
    if items is None:
        items = EpochItems(mix, spec)
    return rank_plan(items.rank_items(topo, spec.uneven), spec, topo)


def rank_span(
    n: int, topo: Topology, uneven: Uneven, take: Callable[[int, int], list[Any]]
) -> RankShare:
    """A rank's contiguous share of one sequence of ``n`` items (``take(start, length)`` returns
    its items), its sample count and its real samples: padded by at most one repeated item under
    uneven="pad"/"mask", cut to floor(n / world_size) under "drop"."""
    rank, world_size = topo.rank, topo.world_size
    q, r = divmod(n, world_size)
    real = q + (1 if rank < r else 0)
    begin = rank * q + min(rank, r)
    total = samples_per_rank(n, world_size=world_size, uneven=uneven)
    keep = min(real, total)
    items = take(begin, keep) if real else []
    for j in range(total - keep):  # padding: at most one sample
        pad_at = (begin + j) % n if real else rank % n
        items.extend(as_pad(it) for it in take(pad_at, 1))
    return RankShare(items, total, keep)


def rank_plan(share: RankShare, spec: EpochSpec, topo: Topology, generation: int = 0) -> RankPlan:
    """Split a rank's ``share.total`` items into per-worker contiguous chunks, sized so that
    batching inside each worker and torch's in-order round robin yield equal, full batches but
    the last. ``generation``: the segment of a resumed epoch (it seeds the workers' shuffles)."""
    batch_size, total = spec.batch_size, share.total
    nb, rem = divmod(total, batch_size)
    partial = rem if rem and not spec.drop_last else 0
    batches = nb + (1 if partial else 0)
    k = topo.streams
    last_worker = (batches - 1) % k if batches else -1
    workers, pos = [], 0
    for w in range(k):
        count = batches // k + (1 if w < batches % k else 0)
        samples = count * batch_size
        last = batch_size if count else 0
        if w == last_worker and partial:
            samples, last = samples - batch_size + partial, partial
        chunk = take_items(share.items, pos, samples)
        plain = all(isinstance(it, Slice) for it in chunk)
        seed = (
            worker_seed(spec.seed, spec.epoch, topo.rank, w, generation) if spec.shuffle else None
        )
        workers.append(
            WorkerPlan(
                worker=w,
                slices=merge_slices(chunk) if plain else (),  # type: ignore[arg-type]
                pieces=() if plain else tuple(chunk),
                num_samples=samples,
                num_batches=count,
                last_batch_size=last,
                shuffle_seed=seed,
            )
        )
        pos += samples
    return RankPlan(
        epoch=spec.epoch,
        rank=topo.rank,
        world_size=topo.world_size,
        num_workers=topo.num_workers,
        batch_size=batch_size,
        num_samples=total if not spec.drop_last else nb * batch_size,
        num_batches=batches,
        workers=tuple(workers),
        num_real=share.real,
    )
