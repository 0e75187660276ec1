"""What the packed plan packs: units (one reading of a sample, or what is left of it in a
resumed epoch) and every rank's share of a fresh epoch as a stream of them
(:mod:`loaders.plan.packed_epoch`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.plan.epoch import EpochItems
from loaders.plan.epoch_spec import EpochSpec, Topology, Uneven
from loaders.plan.even_merge import sources_in_order
from loaders.plan.items import Item, Mix, Slice
from loaders.plan.mixture import Mixture
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
class Units:
    """A stream to pack: entry i is tokens [offsets[i], offsets[i] + tokens[i]) of unit ids[i]
    (:func:`unit_id`: a whole sample's reading in a fresh epoch; what is left of one in a
    resumed one). The unit id carries the sample's source and rep through every segment."""

    ids: np.ndarray
    offsets: np.ndarray
    tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def cut(self, a: int, b: int) -> Units:
        return Units(self.ids[a:b], self.offsets[a:b], self.tokens[a:b])


def concat_units(parts: Sequence[Units]) -> Units:
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Units(empty, empty, empty)
    return Units(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))


_FIELDS = ("ids", "offsets", "tokens")


def shard_starts(mix: Mixture) -> list[np.ndarray]:
    """Each source's shards' first global sample ids (the sources one after another)."""
    out, at = [], 0
    for src in mix.sources:
        sizes = np.asarray(src.sizes, dtype=np.int64)
        out.append(at + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64))
        at += int(sizes.sum())
    return out


def expand_items(items: Sequence[Item], starts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
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
                got_ids[at], got_reps[at] = expand_items(part, starts)
            ids.append(got_ids)
            reps.append(got_reps)
        else:
            raise ConfigError(f"internal error: a fresh epoch's item is a {type(it).__name__}")
    if not ids:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return np.concatenate(ids), np.concatenate(reps)


def fresh_shares(
    mix: Mixture, lengths: np.ndarray, spec: EpochSpec, world_size: int
) -> list[Units]:
    """Every rank's share of a fresh epoch, as units of whole samples."""
    starts, total = shard_starts(mix), mix.num_samples
    items = EpochItems(mix, spec)
    shares = []
    for r in range(world_size):
        share = items.rank_items(Topology(r, world_size), Uneven.MASK).items
        sample, rep = expand_items([it for it in share if not it.pad], starts)
        ids = unit_id(sample, rep, total)
        shares.append(Units(ids, np.zeros_like(ids), lengths[sample]))
    return shares


def spread_units(units: Units, world_size: int) -> list[Units]:
    """Contiguous near-equal shares of ``units``, rank by rank."""
    q, r = divmod(len(units), world_size)
    cuts = [i * q + min(i, r) for i in range(world_size + 1)]
    return [units.cut(a, b) for a, b in itertools.pairwise(cuts)]


__all__ = [
    "Units",
    "concat_units",
    "expand_items",
    "fresh_shares",
    "shard_starts",
    "spread_units",
    "unit_id",
    "unit_sample",
]
