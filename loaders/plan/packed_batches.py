"""What a packed plan is made of (:mod:`loaders.plan.packed_epoch` makes it): a :class:`PackSpec`
(how batches are packed), and a rank's :class:`PackedRankPlan`: its windows
(:class:`PackedWindow`) of batches, then padding batches, dealt to its workers a batch at a
time (:func:`deal`).

A batch is ``rows`` rows; a row is a tuple of entries (unit id, token offset, token count),
at most ``capacity`` tokens in all (a unit is one reading of a sample this epoch:
``rep * samples + sample id``, :func:`loaders.plan.packed_epoch.unit_id`; a sample's first reading is
its sample id); ``()`` is an empty row: no tokens, all of it padding, to be
masked. A padding batch (:func:`empty_batch`) is ``rows`` empty rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loaders.plan.epoch import round_robin
from loaders.plan.epoch_spec import as_enum, k_of
from loaders.plan.packing import Fit, Overflow
from wdstool.base.errors import ConfigError

Entry = tuple[int, int, int]  # (unit id, token offset, token count)
Row = tuple[Entry, ...]  # () is an empty row
Batch = tuple[Row, ...]  # ``rows`` rows


def empty_batch(rows: int) -> Batch:
    """A padding batch: ``rows`` empty rows (every token masked)."""
    return ((),) * rows


def _count(name: str, value: object, *, none: bool = False) -> None:
    if none and value is None:
        return
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be an int >= 1{' or None' if none else ''}, got {value!r}")


@dataclass(frozen=True)
class PackSpec:
    """How batches are packed: ``rows`` sequences of at most ``capacity`` tokens a batch,
    packed ``window`` samples at a time by ``method`` with at most ``open_sequences`` open (the
    packing function's window; None: no bound; ``best_fit_decreasing`` keeps all of a window's
    sequences open, at most ``window``, and puts them in a seeded order when the epoch is
    shuffled); a sample over ``capacity`` is truncated, split or dropped by ``overflow``."""

    capacity: int
    rows: int
    window: int = 1024
    method: Fit | str = Fit.BEST
    open_sequences: int | None = 64
    overflow: Overflow | str = Overflow.TRUNCATE

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", as_enum(Fit, "method", self.method))
        object.__setattr__(self, "overflow", as_enum(Overflow, "overflow", self.overflow))
        for name in ("capacity", "rows", "window"):
            _count(name, getattr(self, name))
        _count("open_sequences", self.open_sequences, none=True)


@dataclass(frozen=True, kw_only=True)
class PackedWindow:
    """Window ``index`` of a rank's share: positions [start, start + len(ids)) of it, its
    units in read order (the worker reads them in this order, once, then fills the batches),
    its batches; ``dropped``: its units left out (overflow="drop"), ``truncated`` and
    ``split``: how many of its samples were cut. In a resumed epoch's later segment a unit
    may be what an earlier one left of it: its entries then start at a later token offset."""

    index: int
    start: int
    ids: tuple[int, ...]
    batches: tuple[Batch, ...]
    dropped: tuple[int, ...] = ()
    truncated: int = 0
    split: int = 0


@dataclass(frozen=True, kw_only=True)
class PackedWorker:
    """A worker's batches: batch i of its rank (the rank's windows' batches in order, then its
    padding batches) goes to worker i % k, so every worker has batches whatever the number of
    windows, and torch's round robin over the workers delivers the rank's batches in plan
    order, the same for any worker count. ``windows``: the rank's windows holding any of its
    batches; ``picks``: for each, the indices of its batches in it (``window.batches``); then
    ``padding`` padding batches; ``skip``: batches it delivered before a same-topology resume."""

    worker: int
    rows: int
    windows: tuple[PackedWindow, ...]
    picks: tuple[tuple[int, ...], ...]
    padding: int = 0
    skip: int = 0

    @property
    def real_batches(self) -> int:
        return sum(len(p) for p in self.picks)

    @property
    def num_batches(self) -> int:
        return self.real_batches + self.padding

    def batches(self) -> list[Batch]:
        """All its batches in its order, padding included (those it skips too)."""
        out = [w.batches[j] for w, p in zip(self.windows, self.picks, strict=True) for j in p]
        return out + [empty_batch(self.rows)] * self.padding

    def owners(self) -> list[int]:
        """For each of its batches (:meth:`batches`), the index in ``windows`` of the window it
        comes from; -1 for a padding batch."""
        out = [g for g, p in enumerate(self.picks) for _j in p]
        return out + [-1] * self.padding


def deal(
    windows: Sequence[PackedWindow], num_batches: int, k: int, rows: int
) -> tuple[PackedWorker, ...]:
    """The rank's batches (``windows``' in order, then padding up to ``num_batches``) dealt to
    ``k`` workers: batch i to worker i % k."""
    picks: list[dict[int, list[int]]] = [{} for _ in range(k)]
    i = 0
    for g, win in enumerate(windows):
        for j in range(len(win.batches)):
            picks[i % k].setdefault(g, []).append(j)
            i += 1
    out = []
    for w in range(k):
        mine = sorted(picks[w])
        padding = len(range(i + (w - i) % k, num_batches, k)) if num_batches > i else 0
        out.append(
            PackedWorker(
                worker=w,
                rows=rows,
                windows=tuple(windows[g] for g in mine),
                picks=tuple(tuple(picks[w][g]) for g in mine),
                padding=padding,
            )
        )
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class PackedRankPlan:
    epoch: int
    rank: int
    world_size: int
    num_workers: int
    rows: int
    capacity: int
    num_batches: int
    workers: tuple[PackedWorker, ...]
    resume_at: int = 0  # batches of this plan already delivered (same-topology resume)
    generation: int = 0  # the segment of the epoch this plan runs (0: a fresh epoch)
    windows: tuple[PackedWindow, ...] = ()  # the rank's windows, in order

    @property
    def remaining_batches(self) -> int:
        return self.num_batches - self.resume_at

    def batch_order(self) -> list[tuple[int, int]]:
        """(worker, batch index) of all the plan's batches as torch's DataLoader delivers them
        from the start: round robin over the workers from 0, skipping exhausted ones."""
        counts = [w.num_batches for w in self.workers]
        return [
            (w, b)
            for b in range(max(counts, default=0))
            for w in range(len(counts))
            if b < counts[w]
        ]

    def delivered(self, batches: int) -> list[int]:
        """Batches each worker had delivered once the rank delivered ``batches`` from the start."""
        counts = [0] * len(self.workers)
        for w, _ in self.batch_order()[:batches]:
            counts[w] += 1
        return counts

    @property
    def rotation(self) -> int:
        """DataLoader worker i serves plan worker (i + rotation) % k: torch's round robin always
        starts at worker 0, while a resumed epoch continues at the worker the uninterrupted run
        would have served next (workers hold unequal batch counts, so not resume_at % k)."""
        if not 0 < self.resume_at < self.num_batches:
            return 0
        return self.batch_order()[self.resume_at][0]

    def loader_order(self) -> list[tuple[int, int]]:
        """(plan worker, batch index) in the order a DataLoader delivers the remaining batches:
        round robin over its workers from DataLoader worker 0 (plan worker ``rotation``),
        skipping exhausted ones (== batch_order() after resume_at)."""
        queues = [range(wp.skip, wp.num_batches) for wp in self.workers]
        return round_robin(queues, self.rotation, k_of(self.num_workers))
