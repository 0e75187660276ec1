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
    as_mixture,
    plan_epoch,
    rank_plan,
    rank_span,
)
from loaders.plan.epoch_spec import EpochSpec, Topology
from loaders.plan.items import Item, Piece, take_items
from loaders.plan.mixture import Mixture
from loaders.plan.shuffle import block_seed, first_block, shuffle_blocks
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


def _checked(plan: RankPlan, seg: Segment) -> RankPlan:
    if not 0 <= seg.batches <= plan.num_batches:
        raise ConfigError(
            f"the state says {seg.batches} batches were delivered, but that epoch has "
            f"{plan.num_batches} on each rank"
        )
    return plan


def _left(plan: RankPlan, batches: int) -> int:
    """Samples one rank of ``plan`` had not delivered after ``batches`` batches (every rank of
    a segment has the same shape, so this holds for all of them)."""
    return sum(
        wp.num_samples - done
        for wp, done in zip(plan.workers, delivered_per_worker(plan, batches), strict=True)
    )


class _History:
    """The plans of an interrupted epoch's segments, built on demand, and what each left.

    What segment ``g`` left is the concatenation, rank by rank, of what each of its ranks had not
    delivered; every rank of a segment left the same number of samples, so the part a rank of
    the next segment takes lies in two or three old ranks, and only their plans are built:
    O(segments) rank plans, whatever the world sizes."""

    def __init__(self, mix: Mixture, history: Sequence[Segment], spec: EpochSpec) -> None:
        self.mix, self.history, self.spec = mix, history, spec
        self.fresh = EpochItems(mix, spec)
        self.plans: dict[tuple[int, int], RankPlan] = {}
        self.lefts: dict[tuple[int, int], list[Item]] = {}

    def spec_of(self, seg: Segment) -> EpochSpec:
        return replace(self.spec, batch_size=seg.batch_size)

    def over_remaining(self, g: int, topo: Topology, batch_size: int) -> RankPlan:
        """Rank ``topo.rank`` of ``topo`` over what segment ``g - 1`` left."""
        n = self.left_total(g - 1)
        spec = replace(self.spec, batch_size=batch_size)

        def take(start: int, length: int) -> list[Item]:
            return self.left_range(g - 1, start, length)

        return rank_plan(rank_span(n, topo, spec.uneven, take), spec, topo, generation=g)

    def plan(self, g: int, r: int) -> RankPlan:
        if (g, r) not in self.plans:
            seg = self.history[g]
            topo = Topology(r, seg.world_size, seg.num_workers)
            if g == 0:
                plan = plan_epoch(self.mix, self.spec_of(seg), topo, self.fresh)
            else:
                plan = self.over_remaining(g, topo, seg.batch_size)
            self.plans[(g, r)] = _checked(plan, seg)
        return self.plans[(g, r)]

    def per_rank_left(self, g: int) -> int:
        return _left(self.plan(g, 0), self.history[g].batches)

    def left_total(self, g: int) -> int:
        return self.history[g].world_size * self.per_rank_left(g)

    def left_range(self, g: int, start: int, length: int) -> list[Item]:
        """Items [start, start + length) of what segment ``g`` left (all its ranks, in order)."""
        each = self.per_rank_left(g)
        out: list[Item] = []
        r = start // each if each else 0
        while length > 0 and each:
            if (g, r) not in self.lefts:
                plan, done = self.plan(g, r), self.history[g].batches
                self.lefts[(g, r)] = remaining_items(plan, done, self.spec.buffer)
            lo = start - r * each
            got = take_items(self.lefts[(g, r)], lo, min(length, each - lo))
            out.extend(got)
            taken = sum(len(it) for it in got)
            start, length, r = start + taken, length - taken, r + 1
        return out


def plan_resumed(
    data: PlanData, history: Sequence[Segment], spec: EpochSpec, topo: Topology
) -> RankPlan:
    """The plan of one rank for the rest of an epoch interrupted after ``history``.

    The last segment's topology again: that segment's plan, starting after its ``batches``
    (``resume_at``) -- exactly what an uninterrupted run would have delivered next. Another
    topology (elastic): every sample the earlier segments had not delivered, split over the new
    ranks and workers as a fresh epoch would be (pad/drop rules apply to what remains), so each
    is delivered exactly once this epoch."""
    past = _History(as_mixture(data), history, spec)
    last = len(history) - 1
    tail = history[last]
    if (tail.world_size, tail.num_workers, tail.batch_size) == (
        topo.world_size,
        topo.num_workers,
        spec.batch_size,
    ):
        plan = past.plan(last, topo.rank)
        skips = delivered_per_worker(plan, tail.batches)
        workers = tuple(
            replace(wp, skip=skip) for wp, skip in zip(plan.workers, skips, strict=True)
        )
        return replace(plan, workers=workers, resume_at=tail.batches)
    return past.over_remaining(len(history), topo, spec.batch_size)
