"""``num_workers="auto"`` / ``prefetch_factor="auto"``: the loader sizes itself from what it
measures, within a memory budget.

It reads the same counters as ``loader.stats()`` over the steps since its last decision:

- **input-bound** (the loop waited for data >= 5% of its time and in >= 10% of its steps:
  ``stall_fraction``, ``input_bound_steps``; the workers busy, not blocked): one more worker, if the cores and the budget allow. The next decision checks
  that it paid (the rate up >= 3%); if not, the worker is taken back and that count is the
  ceiling for the rest of the epoch (hill climbing on the rate the loop gets);
- **not input-bound** (waited for data < 2% of its time) with the queue at least half full
  and the remaining workers able to produce 1.25x what the loop consumed: one worker fewer
  (cores and memory back to the training process), never below a count that was input-bound;
- **bursts** (>= 10% of steps waited although the queue was >= 30% full on average): a deeper
  prefetch queue (at most :data:`MAX_PREFETCH`);
- over the budget: one worker fewer.

Where it acts: with decode threads (``worker_mode="thread"``) while training, every
``interval`` steps: the plan runs ``max_workers`` streams, and the number of threads decoding
at once is gated (:class:`loaders.threads.Gate`), so the order and the pixels never depend on
the count. With worker processes, at epoch boundaries only: the next epoch is planned for the
new count (persistent workers restarted then), and the loader's state records the count of
each epoch's segment, so an exact resume replays it (``adopt``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from loaders.config import LoaderConfig
from loaders.monitor.memory import owned_memory
from loaders.monitor.stats import Meter, Sums, Window
from loaders.topology import Topology, cores_per_rank

log = logging.getLogger("loaders.monitor")

MAX_PREFETCH = 6  # the pool has 8 slots per worker: 6 ready + 2 being made or used
MIN_STEPS = 8  # steps a decision needs behind it
GROW_WAIT, SHRINK_WAIT, JITTER_STEPS, SPARE = 0.05, 0.02, 0.10, 1.25
BURSTY = 0.3  # steps wait with the queue this full on average: bursts, not a slow loader
GAIN = 1.03  # a worker added must raise the rate this much, or it is taken back
# a worker process's own memory (anonymous + shared PSS: its heap, its share of the batch pool)
# before one is measured: 148-176 MB measured here (batches of 16 x 64 px to 64 x 224 px)
WORKER_ESTIMATE = 192 << 20


@dataclass(frozen=True, kw_only=True)
class AutoSpec:
    """What is tuned (``workers``, ``prefetch``), the most workers (``max_workers``: the
    rank's cores, at most 8), the memory budget in bytes of the loader's process tree (owned
    memory: anonymous and shared, ``loaders.monitor.memory``), and how often threads are
    revised (``interval`` steps)."""

    workers: bool
    prefetch: bool
    max_workers: int
    budget: int
    interval: int = 20


@dataclass(frozen=True)
class Change:
    """What the autotuner decides: the workers at work (decode threads let through the gate,
    at once; worker processes, from the next pass) and the prefetch depth, and why."""

    num_workers: int
    prefetch_factor: int
    why: str = ""


class Tunable(Protocol):
    """What the autotuner reads of a loader (:class:`loaders.loader.StreamingLoader` is one),
    and the one way it changes it: :meth:`apply`."""

    meter: Meter | None
    batches_delivered: int

    @property
    def config(self) -> LoaderConfig: ...

    @property
    def topology(self) -> Topology: ...

    @property
    def epoch(self) -> int: ...

    def pids(self) -> list[int]: ...

    def batch_nbytes(self) -> int: ...

    def decoding(self) -> int: ...

    def apply(self, change: Change) -> None: ...


class Autotuner:
    """Revises a loader's workers and prefetch depth; ``last`` says what it did and why,
    ``changes`` lists every decision ``(epoch, step, workers, prefetch, why)``."""

    def __init__(self, spec: AutoSpec) -> None:
        self.spec = spec
        self.last = ""
        self.changes: list[tuple[int, int, int, int, str]] = []
        self._since = Sums()
        self._floor = 1  # a count found input-bound: not gone below again
        self._ceiling = spec.max_workers  # a count that did not pay: not gone above again
        self._trial: tuple[int, float] | None = None  # (workers, samples/s) before adding one

    # --- what the loader calls ---------------------------------------------------------------
    def start(self, loader: Tunable) -> None:
        """Decode threads: as many at work as the budget holds beside this process (its
        batch buffers, prefetch deep), the plan's streams at most."""
        if loader.config.workers.mode.value != "thread" or not self.spec.workers:
            return
        main = owned_memory()  # below the budget: make_loader checked
        per = self._per_worker(loader, main, main, 0, threads=True)
        fit = (self.spec.budget - main) // per if per else loader.topology.num_workers
        # a thread a core and one more to begin with (a decode thread waits on the GIL part of
        # its time: 3 threads made 1.1-1.2x what 2 did on 2 cores here); more where it pays
        first = cores_per_rank() + 1
        limit = max(1, min(first, loader.topology.num_workers, fit))
        loader.apply(Change(limit, loader.config.workers.prefetch_factor, "start"))

    def step(self, loader: Tunable, step: int) -> None:
        """After each batch: with decode threads, a decision every ``interval`` steps."""
        if loader.config.workers.mode.value != "thread" or step % self.spec.interval:
            return
        self._decide(loader, live=True)

    def epoch_end(self, loader: Tunable) -> None:
        """Between epochs: worker processes are revised here (threads too, once more)."""
        if loader.meter is not None and loader.meter.epoch.steps:
            self._decide(loader, live=False)
        self._since = Sums()
        if loader.config.workers.mode.value == "thread":
            # a thread added near the end is not judged on the next pass's start-up
            self._trial = None
            self._ceiling = self.spec.max_workers

    def adopt(self, loader: Tunable, workers: int) -> None:
        """A resumed epoch ran with ``workers``: finish it with them (an exact resume)."""
        if self.spec.workers and workers != loader.topology.num_workers and workers > 0:
            self._apply(
                loader,
                workers,
                loader.config.workers.prefetch_factor,
                f"resumed with the {workers} workers the epoch ran with",
            )

    # --- deciding ------------------------------------------------------------------------
    def _window(self, loader: Tunable) -> Window:
        now = loader.meter.epoch
        w = Window.of(_minus(now, self._since))
        self._since = _minus(now, Sums())  # a copy
        return w

    def _decide(self, loader: Tunable, *, live: bool) -> None:
        w = self._window(loader)
        if w.steps < MIN_STEPS:
            return
        threads = loader.config.workers.mode.value == "thread"
        if not live and threads:
            return  # threads were revised while training
        k = self.active(loader)
        p = loader.config.workers.prefetch_factor
        rate = w.samples_per_s
        if self._trial is not None:  # did the last worker added pay?
            k0, r0 = self._trial
            self._trial = None
            if k > k0 and rate < GAIN * r0:
                self._ceiling = k0
                self._apply(
                    loader,
                    k0,
                    p,
                    f"{k} workers made {rate:.0f} samples/s against {r0:.0f} with {k0}: back "
                    f"to {k0}",
                )
                return
        owned, main = self._owned(loader)
        per_worker = self._per_worker(loader, owned, main, k, threads)
        busy = sum(v for s, v in w.stages_s.items() if s != "handoff")
        capacity = w.samples * k / busy if busy > 0 else float("inf")  # samples/s, never blocked
        stalled = w.input_bound_steps >= JITTER_STEPS and w.input_bound_steps * (w.steps - 1) >= 2
        new_k, new_p, why = k, p, ""
        if owned > self.spec.budget and k > 1:
            new_k, why = k - 1, f"over the memory budget ({_gb(owned)} > {_gb(self.spec.budget)})"
        elif (
            self.spec.workers
            and w.stall_fraction >= GROW_WAIT
            and stalled
            and w.stage_shares.get("handoff", 0.0) < 0.5  # and busy, not blocked
        ):
            self._floor = max(self._floor, k + 1)
            if (
                k < min(self.spec.max_workers, self._ceiling)
                and owned + per_worker <= self.spec.budget
            ):
                new_k = k + 1
                why = f"input-bound ({w.stall_fraction:.0%} of the time waiting for data)"
                self._trial = (k, rate)
        elif (
            self.spec.workers
            and w.stall_fraction < SHRINK_WAIT
            and w.prefetch_occupancy >= 0.5
            and k - 1 >= self._floor
            and capacity * (k - 1) / k >= SPARE * rate
        ):
            new_k = k - 1
            why = (
                f"not input-bound ({w.stall_fraction:.1%} waiting for data, queue "
                f"{w.prefetch_occupancy:.0%} full): {k - 1} can make {SPARE:.2f}x the loop's rate"
            )
        if (
            self.spec.prefetch
            and new_k == k
            and stalled
            and w.prefetch_occupancy >= BURSTY  # the queue fills, then runs dry: bursts
            and p < MAX_PREFETCH
            and owned + k * loader.batch_nbytes() <= self.spec.budget
        ):
            new_p = p + 1
            why = (
                f"{w.input_bound_steps:.0%} of steps waited while the queue was "
                f"{w.prefetch_occupancy:.0%} full on average: a deeper prefetch queue"
            )
        if (new_k, new_p) != (k, p):
            self._apply(loader, new_k, new_p, why)

    def active(self, loader: Tunable) -> int:
        """Workers at work: decode threads let through the gate, or worker processes."""
        if loader.config.workers.mode.value == "thread":
            return min(loader.decoding(), loader.topology.num_workers)
        return loader.topology.num_workers

    def _owned(self, loader: Tunable) -> tuple[int, int]:
        """The owned memory of the loader's processes, and of this (the main) one."""
        each = [owned_memory(pid) for pid in loader.pids()]  # this process first
        return sum(each), each[0]

    def _per_worker(self, loader: Tunable, owned: int, main: int, k: int, threads: bool) -> int:
        """What one more worker would add: a batch buffer per prefetch slot for a thread; for
        a process the tree's owned memory above the main process's, per worker (measured), or
        :data:`WORKER_ESTIMATE` before any ran."""
        slots = (loader.config.workers.prefetch_factor + 2) * loader.batch_nbytes()
        if threads:
            return slots
        if k and owned > main:
            return max(slots, (owned - main) // k)
        return WORKER_ESTIMATE + slots

    def _apply(self, loader: Tunable, workers: int, prefetch: int, why: str) -> None:
        loader.apply(Change(workers, prefetch, why))
        self.last = f"{workers} workers, prefetch {prefetch}: {why}"
        self.changes.append((loader.epoch, loader.batches_delivered, workers, prefetch, why))
        log.info(
            "loader autotune, epoch %d step %d: %s",
            loader.epoch,
            loader.batches_delivered,
            self.last,
        )


def _minus(a: Sums, b: Sums) -> Sums:
    d = Sums()
    for name in Sums.__slots__:
        va, vb = getattr(a, name), getattr(b, name)
        if isinstance(va, dict):
            setattr(d, name, {k: v - vb.get(k, 0.0) for k, v in va.items()})
        else:
            setattr(d, name, va - vb)
    return d


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


__all__ = ["AutoSpec", "Autotuner", "Change", "Tunable"]
