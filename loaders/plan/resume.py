"""The plan of one rank for the rest of an interrupted epoch, on the same or another topology.

The state of an interrupted epoch is its history: the segments it ran, each a topology and the
batches it delivered. Everything else is recomputed from the plan functions, so the state is
small and the remaining samples are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from loaders.plan.epoch import (
    EpochItems,
    PlanData,
    RankPlan,
    Uneven,
    as_mixture,
    as_uneven,
    k_of,
    plan_epoch,
    rank_plan,
    rank_span,
)
from loaders.plan.items import Item, Piece, take_items
from loaders.plan.shuffle import block_seed, first_block, shuffle_blocks, worker_seed
from wdstool.base.errors import ConfigError


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

    rank_items, total, real = rank_span(n, rank, world_size, uneven, take) if n else ([], 0, 0)
    return rank_plan(
        rank_items,
        total,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        num_workers=num_workers,
        batch_size=batch_size,
        drop_last=drop_last,
        seeds=[
            worker_seed(seed, epoch, rank, w, generation) if shuffle else None
            for w in range(k_of(num_workers))
        ],
        num_real=real,
    )


def _checked(plan: RankPlan, seg: Segment) -> RankPlan:
    if not 0 <= seg.batches <= plan.num_batches:
        raise ConfigError(
            f"the state says {seg.batches} batches were delivered, but that epoch has "
            f"{plan.num_batches} on each rank"
        )
    return plan


def plan_resumed(
    data: PlanData,
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
    is delivered exactly once this epoch. The epoch's items are computed once; each rank of an
    earlier segment then costs O(its slices)."""
    mode = as_uneven(uneven)
    common = dict(seed=seed, epoch=epoch, shuffle=shuffle, uneven=mode, drop_last=drop_last)
    mix = as_mixture(data)
    fresh = EpochItems(mix, seed=seed, epoch=epoch, shuffle=shuffle)

    def plan_for(remaining: list[Item] | None, generation: int, seg_rank: int, seg: Segment):
        if remaining is None:
            return plan_epoch(
                mix,
                items=fresh,
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
