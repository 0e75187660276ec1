"""The plan's functions called with flat keywords, as the property tests draw their settings:
``plan_kw(data, seed=.., epoch=.., rank=.., world_size=.., num_workers=.., batch_size=..)``
builds the :class:`EpochSpec` and :class:`Topology` the plan takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loaders.plan import EpochSpec, RankPlan, Segment, Topology, plan_epoch, plan_resumed


def _split(kw: dict[str, Any]) -> tuple[EpochSpec, Topology]:
    topo = Topology(kw.pop("rank", 0), kw.pop("world_size", 1), kw.pop("num_workers", 0))
    return EpochSpec(**kw), topo


def plan_kw(data: Any, *, items: Any = None, **kw: Any) -> RankPlan:
    spec, topo = _split(kw)
    return plan_epoch(data, spec, topo, items)


def resumed_kw(data: Any, history: Sequence[Segment], **kw: Any) -> RankPlan:
    spec, topo = _split(kw)
    return plan_resumed(data, history, spec, topo)
