"""The epoch plan: which samples each rank and DataLoader worker reads, and in what order.

A pure function of (shard sizes, seed, epoch, world size, rank, workers, batch size, options):
no I/O, no environment, no torch.distributed, no global RNG. Everything that must hold
(disjoint cover, equal batch counts on every rank, determinism) is a property of this module.

The epoch sequence G' is the shards in a seeded order, concatenated, rotated by a seeded offset.
Rank k reads a contiguous span of G' (whole shards, at most two partial ones); its share is split
into contiguous chunks, one per worker, sized so that batching inside each worker and torch's
in-order round robin over workers yield exactly ``num_batches`` batches, all full but the last.
Cost: O(shards + this rank's slices); per-sample lists are never built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np

from wdstool.base.errors import ConfigError


class Uneven(StrEnum):
    PAD = "pad"
    DROP = "drop"


def _uneven(value: Uneven | str) -> Uneven:
    try:
        return Uneven(value)
    except ValueError:
        raise ConfigError(f"uneven={value!r} is not one of 'pad', 'drop'") from None


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
        k = k_of(self.num_workers)
        queues = [
            list(range(wp.first_batch(self.batch_size), wp.num_batches)) for wp in self.workers
        ]
        order: list[tuple[int, int]] = []
        active = [(i + self.rotation) % k for i in range(k)]
        while active:
            for w in list(active):
                if queues[w]:
                    order.append((w, queues[w].pop(0)))
                if not queues[w]:
                    active.remove(w)
        return order

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


def samples_per_rank(total_samples: int, *, world_size: int, uneven: Uneven | str = "pad") -> int:
    q, r = divmod(total_samples, world_size)
    return q + (1 if r else 0) if _uneven(uneven) is Uneven.PAD else q


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
    nb, rem = divmod(s, batch_size)
    return nb + (1 if rem and not drop_last else 0)


def _validate(
    sizes: np.ndarray,
    *,
    seed: int,
    epoch: int,
    rank: int,
    world_size: int,
    num_workers: int,
    batch_size: int,
    uneven: Uneven,
) -> int:
    if sizes.ndim != 1 or (sizes.size and sizes.min() < 0):
        raise ConfigError("shard sizes must be non-negative sample counts")
    n = int(sizes.sum())
    if n <= 0:
        raise ConfigError("the dataset has no samples")
    if world_size < 1:
        raise ConfigError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ConfigError(f"rank {rank} is outside 0..{world_size - 1}")
    if num_workers < 0:
        raise ConfigError(f"num_workers must be >= 0, got {num_workers}")
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if epoch < 0 or seed < 0:
        raise ConfigError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}")
    if uneven is Uneven.DROP and n < world_size:
        raise ConfigError(
            f"{n} samples are fewer than {world_size} ranks: with uneven='drop' every rank would "
            "get nothing; use uneven='pad'"
        )
    return n


class _Sequence:
    """The epoch sequence G': shards in epoch order, concatenated, rotated left by ``offset``."""

    def __init__(self, sizes: np.ndarray, order: np.ndarray, offset: int) -> None:
        self.order = order
        self.ends = np.cumsum(sizes[order])  # end position of each shard in G (unrotated)
        self.total = int(self.ends[-1])
        self.offset = offset

    def slices(self, start: int, length: int) -> list[Slice]:
        """Slices covering G'[start : start + length] (wrapping around)."""
        out: list[Slice] = []
        pos = (start + self.offset) % self.total  # position in unrotated G
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
                out.append(Slice(int(self.order[i]), first, first + take))
            pos += take
            length -= take
            i += 1
        return out


def _merge(slices: list[Slice]) -> tuple[Slice, ...]:
    merged: list[Slice] = []
    for s in slices:
        if merged and merged[-1].shard == s.shard and merged[-1].stop == s.start:
            merged[-1] = Slice(s.shard, merged[-1].start, s.stop)
        else:
            merged.append(s)
    return tuple(merged)


def _take(slices: list[Slice], start: int, length: int) -> list[Slice]:
    """Sub-range [start, start+length) of the concatenation of ``slices``."""
    out, pos = [], 0
    for s in slices:
        lo, hi = max(start, pos), min(start + length, pos + len(s))
        if lo < hi:
            out.append(Slice(s.shard, s.start + lo - pos, s.start + hi - pos))
        pos += len(s)
        if pos >= start + length:
            break
    return out


def _shuffle_seed(seed: int, epoch: int, rank: int, worker: int, generation: int = 0) -> int:
    entropy = [seed, epoch, rank, worker, 0xB0FF] + ([generation] if generation else [])
    state = np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)
    return int(state[0]) >> 1


def plan_epoch(
    shard_sizes: Sequence[int],
    *,
    seed: int,
    epoch: int,
    rank: int,
    world_size: int,
    num_workers: int,
    batch_size: int,
    shuffle: bool = True,
    uneven: Uneven | str = "pad",
    drop_last: bool = False,
) -> RankPlan:
    """The plan of one rank for one epoch (see the module docstring)."""
    mode = _uneven(uneven)
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    n = _validate(
        sizes,
        seed=seed,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        num_workers=num_workers,
        batch_size=batch_size,
        uneven=mode,
    )
    if shuffle:
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, 0x5EED])))
        order = rng.permutation(len(sizes))
        offset = int(rng.integers(n))
    else:
        order, offset = np.arange(len(sizes)), 0
    seq = _Sequence(sizes, order, offset)

    rank_slices, total = _rank_span(n, rank, world_size, mode, seq.slices)
    return _rank_plan(
        rank_slices,
        total,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        num_workers=num_workers,
        batch_size=batch_size,
        drop_last=drop_last,
        seeds=[
            _shuffle_seed(seed, epoch, rank, w) if shuffle else None
            for w in range(k_of(num_workers))
        ],
    )


def _rank_span(
    n: int, rank: int, world_size: int, uneven: Uneven, take: Callable[[int, int], list[Any]]
) -> tuple[list[Any], int]:
    """A rank's contiguous share of an epoch sequence of ``n`` items (``take(start, length)``
    returns its items) and its sample count: padded by at most one repeated item under
    uneven="pad", cut to floor(n / world_size) under "drop"."""
    q, r = divmod(n, world_size)
    real = q + (1 if rank < r else 0)
    begin = rank * q + min(rank, r)
    total = samples_per_rank(n, world_size=world_size, uneven=uneven)
    items = take(begin, min(real, total)) if real else []
    for j in range(total - min(real, total)):  # padding: at most one sample
        pad_at = (begin + j) % n if real else rank % n
        items.extend(take(pad_at, 1))
    return items, total


def k_of(num_workers: int) -> int:
    """Streams per rank: one per DataLoader worker, one in-process stream for 0 workers."""
    return max(1, num_workers)


def _rank_plan(
    rank_items: list[Item],
    total: int,
    *,
    epoch: int,
    rank: int,
    world_size: int,
    num_workers: int,
    batch_size: int,
    drop_last: bool,
    seeds: list[int | None],
    resumed: bool = False,
) -> RankPlan:
    """Split a rank's ``total`` items into per-worker contiguous chunks, sized so that batching
    inside each worker and torch's in-order round robin yield equal, full batches but the last."""
    nb, rem = divmod(total, batch_size)
    partial = rem if rem and not drop_last else 0
    batches = nb + (1 if partial else 0)
    k = k_of(num_workers)
    last_worker = (batches - 1) % k if batches else -1
    workers, pos = [], 0
    for w in range(k):
        count = batches // k + (1 if w < batches % k else 0)
        samples = count * batch_size
        last = batch_size if count else 0
        if w == last_worker and partial:
            samples, last = samples - batch_size + partial, partial
        chunk = take_items(rank_items, pos, samples)
        workers.append(
            WorkerPlan(
                worker=w,
                slices=() if resumed else _merge(chunk),  # type: ignore[arg-type]
                pieces=tuple(chunk) if resumed else (),
                num_samples=samples,
                num_batches=count,
                last_batch_size=last,
                shuffle_seed=seeds[w],
            )
        )
        pos += samples
    return RankPlan(
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        num_workers=num_workers,
        batch_size=batch_size,
        num_samples=total if not drop_last else nb * batch_size,
        num_batches=batches,
        workers=tuple(workers),
    )


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


# --- shuffle blocks --------------------------------------------------------------------------
def shuffle_blocks(total: int, buffer: int, first: int) -> list[int]:
    """Block boundaries of a worker's stream of ``total`` items: ``[0, b1, b2, ..., total]``.

    Each block is read whole (compressed bytes only) and yielded in a seeded permutation. The
    first block holds ``first`` items so the first batch comes quickly; sizes double up to
    ``buffer``. Because a block's permutation depends only on (seed, block index), a stream can
    be restarted at any output position by re-reading one block: resuming costs at most one
    shuffle buffer, wherever in the epoch the run stopped."""
    if total <= 0:
        return [0]
    if buffer <= 1:
        return [0, total]
    bounds = [0]
    size = max(1, min(first, buffer))
    while bounds[-1] < total:
        bounds.append(min(total, bounds[-1] + size))
        size = min(buffer, size * 2)
    return bounds


def first_block(buffer: int, batch_size: int) -> int:
    return max(1, min(buffer, max(100, batch_size)))


def block_seed(worker_seed: int, block: int) -> int:
    state = np.random.SeedSequence([worker_seed, block, 0xB10C]).generate_state(1, dtype=np.uint64)
    return int(state[0]) >> 1


def block_permutation(seed: int, length: int) -> np.ndarray:
    return np.random.Generator(np.random.PCG64(seed)).permutation(length)


def delivered_per_worker(plan: RankPlan, batches: int) -> list[int]:
    """Samples each worker of ``plan`` had handed out when the rank had delivered ``batches``."""
    counts = [0] * len(plan.workers)
    for w, _b in plan.batch_order()[:batches]:
        counts[w] += 1
    return [
        min(c * plan.batch_size, wp.num_samples) for c, wp in zip(counts, plan.workers, strict=True)
    ]


def remaining_items(plan: RankPlan, batches: int, buffer: int) -> list[Item]:
    """What one rank had not delivered yet after ``batches`` batches of ``plan``: per worker,
    the partly delivered shuffle block (minus what it delivered) and the rest of its stream."""
    out: list[Item] = []
    delivered = delivered_per_worker(plan, batches)
    for wp, done in zip(plan.workers, delivered, strict=True):
        n = wp.num_samples
        if done >= n:
            continue
        items = list(wp.items)
        if wp.shuffle_seed is None or buffer <= 1:
            out.extend(take_items(items, done, n - done))
            continue
        bounds = shuffle_blocks(n, buffer, first_block(buffer, plan.batch_size))
        j = int(np.searchsorted(bounds, done, side="right")) - 1
        start, stop = bounds[j], bounds[j + 1]
        taken = done - start
        block = tuple(take_items(items, start, stop - start))
        if taken:
            out.append(Piece(block, 0, stop - start - taken, block_seed(wp.shuffle_seed, j), taken))
        else:
            out.extend(block)
        out.extend(take_items(items, stop, n - stop))
    return out


# --- resumed epochs ------------------------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    """A stretch of one epoch run with one topology: ``batches`` of its plan were delivered
    (on every rank alike)."""

    world_size: int
    num_workers: int
    batch_size: int
    batches: int


def _plan_items(
    remaining: list[Item],
    *,
    generation: int,
    seed: int,
    epoch: int,
    rank: int,
    world_size: int,
    num_workers: int,
    batch_size: int,
    shuffle: bool,
    uneven: Uneven,
    drop_last: bool,
) -> RankPlan:
    """Like plan_epoch, over the remaining items of an interrupted epoch (kept in their order;
    each worker shuffles its stream with seeds of this generation)."""
    n = sum(len(it) for it in remaining)

    def take(start: int, length: int) -> list[Item]:
        return take_items(remaining, start, length)

    rank_items, total = _rank_span(n, rank, world_size, uneven, take) if n else ([], 0)
    return _rank_plan(
        rank_items,
        total,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        num_workers=num_workers,
        batch_size=batch_size,
        drop_last=drop_last,
        seeds=[
            _shuffle_seed(seed, epoch, rank, w, generation) if shuffle else None
            for w in range(k_of(num_workers))
        ],
        resumed=True,
    )


def _checked(plan: RankPlan, seg: Segment) -> RankPlan:
    if not 0 <= seg.batches <= plan.num_batches:
        raise ConfigError(
            f"the state says {seg.batches} batches were delivered, but that epoch has "
            f"{plan.num_batches} on each rank"
        )
    return plan


def plan_resumed(
    shard_sizes: Sequence[int],
    history: Sequence[Segment],
    *,
    seed: int,
    epoch: int,
    rank: int,
    world_size: int,
    num_workers: int,
    batch_size: int,
    shuffle: bool = True,
    shuffle_buffer: int = 2000,
    uneven: Uneven | str = "pad",
    drop_last: bool = False,
) -> RankPlan:
    """The plan of one rank for the rest of an epoch interrupted after ``history``.

    The last segment's topology again: that segment's plan, starting after its ``batches``
    (``resume_at``) -- exactly what an uninterrupted run would have delivered next. Another
    topology (elastic): every sample the earlier segments had not delivered, split over the new
    ranks and workers as a fresh epoch would be (pad/drop rules apply to what remains), so each
    is delivered exactly once this epoch. Costs one plan per rank of every earlier segment."""
    mode = _uneven(uneven)
    common = dict(seed=seed, epoch=epoch, shuffle=shuffle, uneven=mode, drop_last=drop_last)

    def plan_for(remaining: list[Item] | None, generation: int, seg_rank: int, seg: Segment):
        if remaining is None:
            return plan_epoch(
                shard_sizes,
                rank=seg_rank,
                world_size=seg.world_size,
                num_workers=seg.num_workers,
                batch_size=seg.batch_size,
                **common,  # type: ignore[arg-type]
            )
        return _plan_items(
            remaining,
            generation=generation,
            rank=seg_rank,
            world_size=seg.world_size,
            num_workers=seg.num_workers,
            batch_size=seg.batch_size,
            **common,  # type: ignore[arg-type]
        )

    here = Segment(world_size, num_workers, batch_size, 0)
    remaining: list[Item] | None = None
    for g, seg in enumerate(history):
        last = g == len(history) - 1
        same = (seg.world_size, seg.num_workers, seg.batch_size) == (
            world_size,
            num_workers,
            batch_size,
        )
        if last and same:
            plan = _checked(plan_for(remaining, g, rank, seg), seg)
            skips = delivered_per_worker(plan, seg.batches)
            workers = tuple(
                replace(wp, skip=skip) for wp, skip in zip(plan.workers, skips, strict=True)
            )
            return replace(plan, workers=workers, resume_at=seg.batches)
        nxt: list[Item] = []
        for r in range(seg.world_size):
            plan = _checked(plan_for(remaining, g, r, seg), seg)
            nxt.extend(remaining_items(plan, seg.batches, shuffle_buffer if shuffle else 0))
        remaining = nxt
    return plan_for(remaining, len(history), rank, here)
