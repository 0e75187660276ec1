"""The plan of one rank for one fresh epoch.

The epoch sequence G' is the shards in a seeded order, concatenated, rotated by a seeded offset.
Rank k reads a contiguous span of G' (whole shards, at most two partial ones); its share is split
into contiguous chunks, one per worker, sized so that batching inside each worker and torch's
in-order round robin over workers yield exactly ``num_batches`` batches, all full but the last.
Cost: O(shards + this rank's slices); per-sample lists are never built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from loaders.plan.items import Item, Slice, merge_slices, take_items
from loaders.plan.shuffle import worker_seed
from wdstool.base.errors import ConfigError


class Uneven(StrEnum):
    PAD = "pad"
    DROP = "drop"


def as_uneven(value: Uneven | str) -> Uneven:
    try:
        return Uneven(value)
    except ValueError:
        raise ConfigError(f"uneven={value!r} is not one of 'pad', 'drop'") from None


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
    return q + (1 if r else 0) if as_uneven(uneven) is Uneven.PAD else q


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
    mode = as_uneven(uneven)
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

    rank_slices, total = rank_span(n, rank, world_size, mode, seq.slices)
    return rank_plan(
        rank_slices,
        total,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        num_workers=num_workers,
        batch_size=batch_size,
        drop_last=drop_last,
        seeds=[
            worker_seed(seed, epoch, rank, w) if shuffle else None for w in range(k_of(num_workers))
        ],
    )


def rank_span(
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


def rank_plan(
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
                slices=() if resumed else merge_slices(chunk),  # type: ignore[arg-type]
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
