"""``loader.stats()``: what the loader did for the epoch so far and over its last steps.

:class:`Meter` lives in the loader's (main) process. Per batch it records how long the
training loop waited in ``next()``, how long the loop ran before asking again (the step), how
many batches were ready in the prefetch queue, and the worker's clock that came with the batch
(``loaders.monitor.clock``): a few dict additions (~5 us a batch). :meth:`Meter.stats` turns
the sums into a :class:`LoaderStats` on demand: for the epoch so far and a rolling window of
the last ``window`` steps, plus the memory of the loader's process tree and of the host.

Waits and steps are the training loop's own clock: ``wait_s`` is exactly what a loop timing
its ``next(it)`` calls would measure (the first batch of a pass included: workers starting,
the first shards opening; ``wait_fraction`` leaves it out, as a steady-state share).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from loaders.monitor.memory import Memory, tree_memory

STAGES = ("read", "decode", "resize", "tail", "assembly", "handoff")
EVENTS = (
    "bytes_read",
    "network_bytes",
    "requests",
    "retries",
    "cache_hits",
    "cache_misses",
    "cache_evictions",
)
# A step waited for data ("stalled") when its batch was not ready as the loop asked for it, by
# what its wait exceeds the cheapest wait for a batch that was: a ready batch still costs the
# loop ~1 ms here (the hand-over itself: receiving it, unwrapping it; more when the training
# process is short of CPU), which is no sign of a slow loader. A step is input-bound when it stalled
# longer than this ...
BOUND_WAIT_S = 0.001
BOUND_WAIT_SHARE = 0.05  # ... and longer than this share of the step


class Sums:
    """Running sums over steps (an epoch, or the steps of a window); ``Window.of`` makes a
    window of them, and the autotuner diffs two (``loaders.monitor.autotune``)."""

    __slots__ = (
        "bound",
        "first",
        "longest",
        "outside",
        "ready",
        "replaced",
        "samples",
        "stall",
        "step",
        "steps",
        "wait",
        "worker",
    )

    def __init__(self) -> None:
        self.steps = self.samples = self.bound = self.replaced = 0
        self.wait = self.step = self.ready = self.first = self.outside = self.stall = 0.0
        self.longest = 0.0  # the longest wait for a batch (a pass's first left out)
        self.worker: dict[str, float] = {}

    def add(self, rec: _Step) -> None:
        self.steps += 1
        self.samples += rec.samples
        self.wait += rec.wait
        self.step += rec.step
        self.ready += rec.ready
        self.replaced += rec.replaced
        if rec.first:
            self.first += rec.wait
        else:
            self.longest = max(self.longest, rec.wait)
            self.stall += rec.stall
            if rec.stall > BOUND_WAIT_S and rec.stall > BOUND_WAIT_SHARE * (rec.wait + rec.step):
                self.bound += 1
        w = self.worker
        for k, v in rec.worker.items():
            w[k] = w.get(k, 0.0) + v


@dataclass(frozen=True, slots=True)
class _Step:
    wait: float  # seconds in next()
    step: float  # seconds the loop ran before this next() (its previous step)
    samples: int
    ready: float  # batches ready when next() was called, over the queue's capacity
    worker: dict[str, float]
    replaced: int
    first: bool  # the first batch of a pass
    stall: float = 0.0  # the wait beyond the cheapest one seen (a ready batch's)


@dataclass(frozen=True, kw_only=True)
class Window:
    """Steps over a stretch of training (the epoch so far, or the last steps).

    ``seconds``: the training loop's time over these steps (waits + steps);
    ``wait_fraction``: the share of it spent waiting in ``next()`` (the first batch of a pass
    left out); ``stall_fraction``: the share spent waiting beyond what a ready batch costs
    (the cheapest wait seen: the hand-over itself), i.e. for data; ``input_bound_steps``: the
    share of steps that stalled more than 1 ms and 5% of their time; ``stages_s``: worker seconds per stage (summed over workers), ``stage_shares``
    the same as shares of the workers' time; ``worker_cpu``: CPU seconds over wall seconds of
    a worker (1.0: a core busy); ``prefetch_occupancy``: batches ready when the loop asked,
    over the queue's capacity (workers x prefetch_factor), averaged over steps;
    ``workers_busy``: the workers' time making batches (every stage but the hand-off) over
    the workers' time there was (workers x ``seconds``): below 1 where workers sat blocked on
    a full queue or had nothing to make; ``wait_per_batch_s`` and ``longest_wait_s``: the mean
    and the longest wait in ``next()`` for a batch (a pass's first left out): a batch that
    kept the loop waiting while other workers' batches were ready shows here.
    """

    steps: int = 0
    samples: int = 0
    seconds: float = 0.0
    samples_per_s: float = 0.0
    wait_s: float = 0.0
    first_batch_s: float = 0.0
    wait_fraction: float = 0.0
    stall_fraction: float = 0.0
    input_bound_steps: float = 0.0
    stages_s: dict[str, float] = field(default_factory=dict)
    stage_shares: dict[str, float] = field(default_factory=dict)
    worker_cpu: float = 0.0
    prefetch_occupancy: float = 0.0
    workers_busy: float = 0.0
    wait_per_batch_s: float = 0.0
    longest_wait_s: float = 0.0
    bytes_read: int = 0
    network_bytes: int = 0
    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_evictions: int = 0
    samples_replaced: int = 0

    @classmethod
    def of(cls, s: Sums, workers: int = 0) -> Window:
        """The window of sums ``s`` of a loader of ``workers`` workers (0: none, the main
        process makes the batches: one)."""
        seconds = s.wait + s.step
        steady = seconds - s.first - s.outside
        w = s.worker
        stages = {
            "read": w.get("read", 0.0),
            "decode": w.get("decode", 0.0),
            "resize": max(0.0, w.get("sample", 0.0) - w.get("decode", 0.0) - w.get("tail", 0.0)),
            "tail": w.get("tail", 0.0),
            # suspended after a batch, less the wait for a place among the threads decoding
            # at once (autotuned decode threads: ``gated``), which is nobody's work
            "handoff": max(0.0, w.get("handoff", 0.0) - w.get("gated", 0.0)),
        }
        stages["assembly"] = max(
            0.0,
            w.get("wall", 0.0) - w.get("read", 0.0) - w.get("sample", 0.0) - w.get("handoff", 0.0),
        )
        stages = {k: stages[k] for k in STAGES}
        total = sum(stages.values())
        wall = w.get("wall", 0.0)
        busy = total - stages["handoff"]
        later = s.steps - (1 if s.first else 0)  # the batches after a pass's first
        return cls(
            steps=s.steps,
            samples=s.samples,
            seconds=seconds,
            samples_per_s=s.samples / seconds if seconds > 0 else 0.0,
            wait_s=s.wait,
            first_batch_s=s.first,
            wait_fraction=(s.wait - s.first - s.outside) / steady if steady > 0 else 0.0,
            stall_fraction=s.stall / steady if steady > 0 else 0.0,
            input_bound_steps=s.bound / max(1, s.steps - (1 if s.first else 0)),
            stages_s=stages,
            stage_shares={k: v / total if total > 0 else 0.0 for k, v in stages.items()},
            worker_cpu=w.get("cpu", 0.0) / wall if wall > 0 else 0.0,
            prefetch_occupancy=s.ready / s.steps if s.steps else 0.0,
            workers_busy=min(1.0, busy / (max(1, workers) * (seconds - s.outside)))
            if seconds > s.outside
            else 0.0,
            wait_per_batch_s=(s.wait - s.first - s.outside) / later if later > 0 else 0.0,
            longest_wait_s=s.longest,
            samples_replaced=s.replaced,
            **{k: int(w.get(k, 0)) for k in EVENTS},  # type: ignore[arg-type]
        )


@dataclass(frozen=True, kw_only=True)
class LoaderStats:
    """``loader.stats()``: ``epoch_so_far`` (the current pass over the epoch: the rest of it
    after a resume) and ``recent`` (the last ``window`` steps) of this rank's loader, the settings in force (``workers``, ``worker_mode``, ``prefetch_factor``, and
    what the autotuner last chose and why), and the memory of the loader's process tree and the
    host. ``as_dict()`` is the JSON form (stream-bench writes the same); ``flat()`` a flat
    ``{"loader/NAME": number}`` dict for a metrics logger."""

    epoch: int
    rank: int
    step: int  # batches delivered in the current pass
    workers: int
    worker_mode: str
    prefetch_factor: int
    epoch_so_far: Window
    recent: Window
    memory: Memory
    all_epochs: Window = field(default_factory=Window)  # since the loader was made
    # what making the loader fetched (index files looked for, 404s included; the header scan
    # of shards no index counts): storage counters only; also counted in ``all_epochs``
    setup: Window = field(default_factory=Window)
    autotune: str = ""  # the autotuner's last decision, in words ("" without autotuning)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def flat(self, prefix: str = "loader/") -> dict[str, float]:
        """Numbers only, for TensorBoard, W&B, Lightning's ``log_dict``: the recent window's
        rates and shares, the epoch's counters, memory."""
        r, e, m = self.recent, self.epoch_so_far, self.memory
        out = {
            "samples_per_s": r.samples_per_s,
            "wait_fraction": r.wait_fraction,
            "stall_fraction": r.stall_fraction,
            "input_bound_steps": r.input_bound_steps,
            "prefetch_occupancy": r.prefetch_occupancy,
            "worker_cpu": r.worker_cpu,
            "workers_busy": r.workers_busy,
            "wait_per_batch_s": r.wait_per_batch_s,
            "longest_wait_s": r.longest_wait_s,
            "workers": self.workers,
            "prefetch_factor": self.prefetch_factor,
            "epoch_wait_s": e.wait_s,
            "epoch_samples": e.samples,
            "bytes_read": e.bytes_read,
            "network_bytes": e.network_bytes,
            "requests": e.requests,
            "retries": e.retries,
            "cache_hits": e.cache_hits,
            "cache_misses": e.cache_misses,
            "cache_evictions": e.cache_evictions,
            "samples_replaced": e.samples_replaced,
            "setup_network_bytes": self.setup.network_bytes,
            "setup_requests": self.setup.requests,
            "memory_pss_bytes": m.pss,
            "memory_rss_bytes": m.rss,
            "host_memory_used_bytes": m.host_used,
        }
        out.update({f"stage_share/{k}": v for k, v in r.stage_shares.items()})
        return {prefix + k: float(v) for k, v in out.items()}


class Meter:
    """The loader's side of the stats: fed one record per batch by ``StreamingLoader``."""

    def __init__(self, window: int = 50) -> None:
        self.epoch = Sums()
        self.recent: deque[_Step] = deque(maxlen=window)
        self.total = Sums()  # all epochs: what Prometheus' counters count
        self._last_yield: float | None = None
        self._got_at = 0.0
        self.base = float("inf")  # the cheapest wait for a batch that was ready: the hand-over
        self._first = True
        self.setup = Sums()

    def made(self, events: dict[str, float]) -> None:
        """What making the loader fetched (``wdstool.base.counters`` events: the index looked
        for, the scan): its own window, and counted once in the all-epochs one."""
        for sums in (self.setup, self.total):
            for k in EVENTS:
                if events.get(k):
                    sums.worker[k] = sums.worker.get(k, 0.0) + events[k]

    def new_epoch(self) -> None:
        self.epoch = Sums()
        self.recent.clear()
        self._first = True
        self._last_yield = None

    def got(
        self,
        asked_at: float,
        samples: int,
        ready: float,
        next_ready: bool,
        worker: dict[str, float] | None,
        replaced: int,
    ) -> None:
        """A batch came: asked for at ``asked_at``, ``samples`` in it; when asked, ``ready``
        (the share of the prefetch queue holding ready batches) and whether this batch was
        among them (``next_ready``); the worker's clock; samples replaced."""
        now = self._got_at = time.perf_counter()
        step = asked_at - self._last_yield if self._last_yield is not None else 0.0
        wait = now - asked_at
        if self._first or next_ready:  # ready: the wait is the hand-over's, not data's
            stall = 0.0
            if not self._first:
                self.base = min(self.base, wait)
        else:  # waited for the batch to be made: beyond what a hand-over costs
            stall = max(0.0, wait - (self.base if self.base != float("inf") else 0.0))
        rec = _Step(wait, step, samples, ready, worker or {}, replaced, self._first, stall)
        self._first = False
        self.epoch.add(rec)
        self.total.add(rec)
        self.recent.append(rec)

    def ended(self, seconds: float) -> None:
        """The pass's last ``next()`` took ``seconds`` (no batch: the workers finishing)."""
        self._outside(seconds)

    def _outside(self, seconds: float) -> None:
        """Seconds the loop waited in ``next()`` for something else than a batch (the pass's
        end, the exporters): in ``wait_s``, not in ``wait_fraction``."""
        for sums in (self.epoch, self.total):
            sums.wait += seconds
            sums.outside += seconds

    def yielded(self) -> None:
        """The batch goes to the loop now: what ran since ``got`` (the exporters) was waited."""
        now = time.perf_counter()
        self._outside(now - self._got_at)
        self._last_yield = now

    def paused(self) -> None:
        """The pass ended (or was abandoned): the time until the next one is no step."""
        self._last_yield = None
        self._first = True

    def windows(self, workers: int = 0) -> tuple[Window, Window]:
        recent = Sums()
        for rec in self.recent:
            recent.add(rec)
        return Window.of(self.epoch, workers), Window.of(recent, workers)

    def stats(self, pids: list[int] | None = None, **settings: Any) -> LoaderStats:
        """The stats; ``pids``: the loader's processes whose memory to read (None: none is
        read, ``memory`` is zeros: the verdict needs none of it)."""
        workers = int(settings.get("workers", 0))
        epoch, recent = self.windows(workers)
        return LoaderStats(
            epoch_so_far=epoch,
            recent=recent,
            all_epochs=Window.of(self.total, workers),
            setup=Window.of(self.setup),
            memory=Memory() if pids is None else tree_memory(pids),
            **settings,
        )


__all__ = ["EVENTS", "STAGES", "LoaderStats", "Meter", "Window"]
