"""The plan's functions called with flat keywords, as the property tests draw their settings:
``plan_kw(data, seed=.., epoch=.., rank=.., world_size=.., num_workers=.., batch_size=..)``
builds the :class:`EpochSpec` and :class:`Topology` the plan takes; and the batches a rank's
plan delivers, in DataLoader order (:func:`delivered`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from loaders.plan import (
    EpochSpec,
    Mix,
    Piece,
    RankPlan,
    Segment,
    Slice,
    Topology,
    WorkerPlan,
    plan_epoch,
    plan_resumed,
)
from loaders.plan.even_merge import sources_in_order

Sample = tuple[int, int, int]  # (source, shard, index in shard)


def _split(kw: dict[str, Any]) -> tuple[EpochSpec, Topology]:
    topo = Topology(kw.pop("rank", 0), kw.pop("world_size", 1), kw.pop("num_workers", 0))
    return EpochSpec(**kw), topo


def plan_kw(data: Any, *, items: Any = None, **kw: Any) -> RankPlan:
    spec, topo = _split(kw)
    return plan_epoch(data, spec, topo, items)


def resumed_kw(data: Any, history: Sequence[Segment], **kw: Any) -> RankPlan:
    spec, topo = _split(kw)
    return plan_resumed(data, history, spec, topo)


def batch_sizes(plan: RankPlan, wp: WorkerPlan) -> list[int]:
    """The size of each of the worker's batches: full ones, then its last one."""
    sizes = [plan.batch_size] * wp.num_batches
    if sizes:
        sizes[-1] = wp.last_batch_size
    return sizes


def split(ids: list[Any], sizes: Sequence[int]) -> list[list[Any]]:
    """``ids`` cut into consecutive batches of ``sizes``."""
    batches, pos = [], 0
    for n in sizes:
        batches.append(ids[pos : pos + n])
        pos += n
    return batches


def slice_ids(wp: WorkerPlan) -> list[tuple[int, int]]:
    """Every (shard, index) of the worker's slices, in read order."""
    return [(s.shard, i) for s in wp.slices for i in range(s.start, s.stop)]


def expand(items) -> list[tuple[Sample, int, bool]]:
    """Every planned sample of ``items`` (a mixture's: slices, mixes, pieces) in read order:
    (sample, rep, pad)."""
    out = []
    for it in items:
        if isinstance(it, Slice):
            out += [((it.source, it.shard, i), it.rep, it.pad) for i in range(it.start, it.stop)]
            continue
        if isinstance(it, Mix):
            parts = [iter(expand(p)) for p in it.per_source()]
            got = [next(parts[s]) for s in sources_in_order(it.spans, it.lo, it.hi)]
        else:
            assert isinstance(it, Piece)
            base = expand(it.base)
            got = [base[j] for j in it.kept()]
        out += [(s, r, p or it.pad) for s, r, p in got]
    return out


def mixture_ids(wp: WorkerPlan) -> list[tuple[Sample, int, bool]]:
    """Every (sample, rep, pad) of the worker's items, in read order."""
    return expand(wp.items)


def delivered(plan: RankPlan, ids: Callable[[WorkerPlan], list] = slice_ids) -> list[list]:
    """The batches this rank delivers, in DataLoader order (no shuffle inside workers needed
    for counts): each worker's planned samples (``ids(worker plan)``, :func:`slice_ids` by
    default) cut into its batches, then the batches in the plan's order."""
    per_worker = []
    for wp in plan.workers:
        got = ids(wp)
        assert len(got) == wp.num_samples
        sizes = batch_sizes(plan, wp)
        assert sum(sizes) == len(got)
        per_worker.append(split(got, sizes))
    return [per_worker[w][b] for w, b in plan.batch_order()]
