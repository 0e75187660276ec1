"""``worker_mode="thread"``: the DataLoader's job done by decode threads inside the loader's process.

Each plan worker's stream (exactly what a DataLoader worker process would run:
``ShardStreamDataset.stream``) runs in a thread of its own and fills a bounded queue
(``prefetch_factor`` batches deep); batches are handed out in the order torch's DataLoader
delivers them (``RankPlan.loader_order``), so keys, pixels, resume and equal batch counts are
those of the process mode. The decode (libjpeg-turbo, the partial decoder), the crop and the
antialiased resize release the GIL, so the threads decode in parallel; what they share is one
Python heap, one copy of torch, and the batch pool: no process per worker.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from loaders.dataset import ShardStreamDataset
from loaders.delivery import Delivery
from wdstool.base import counters

_END = object()


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Gate:
    """How many decode threads may decode at once: a counting semaphore whose limit can be
    changed while they run (the autotuner's ``num_workers="auto"``). A thread holds a place only
    while it makes a batch, never while it waits for room in its queue, so a lower limit only
    slows production, never the order: which stream makes which batch is the plan's. The
    stream the loop will ask next (``want``) goes first when it waits. The time a thread
    waits here is counted apart (``gated``), not as hand-off."""

    def __init__(self, limit: int) -> None:
        self._cond = threading.Condition()
        self._limit = limit
        self._busy = 0
        self.want: int | None = None  # the stream whose batch the loop needs next
        self._waiting: set[int] = set()  # streams waiting for a place

    @property
    def limit(self) -> int:
        return self._limit

    def set_limit(self, limit: int) -> None:
        with self._cond:
            self._limit = max(1, limit)
            self._cond.notify_all()

    @contextlib.contextmanager
    def enter(self, stream: int) -> Iterator[None]:
        """Hold a place for ``stream`` while the block runs."""
        t0 = time.perf_counter()
        with self._cond:
            self._waiting.add(stream)
            while self._busy >= self._limit or (stream != self.want and self.want in self._waiting):
                self._cond.wait(0.05)  # ``want`` moves on without a notify
            self._waiting.discard(stream)
            self._busy += 1
        if counters.enabled:
            counters.add_time("gated", time.perf_counter() - t0)
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()


def set_depth(q: queue.Queue, depth: int) -> None:
    """Change how many batches ``q`` holds while it is in use (prefetch_factor="auto")."""
    with q.mutex:
        q.maxsize = depth
        q.not_full.notify_all()


class ThreadedBatches:
    """An iterable over one epoch's batches of ``dataset``, produced by one thread per plan
    worker. A consumer that stops early (``break``, an exception) stops the threads."""

    def __init__(self, dataset: ShardStreamDataset, prefetch_factor: int = 4) -> None:
        self.dataset = dataset
        self.prefetch_factor = prefetch_factor
        self.queues: dict[int, queue.Queue] = {}  # the current pass's, per plan worker
        self.gate = Gate(1 << 30)  # decode threads at work at once (all, unless autotuned)

    def set_prefetch(self, depth: int) -> None:
        """Batches each decode thread may hold ready, from now on."""
        self.prefetch_factor = depth
        for q in self.queues.values():
            set_depth(q, depth)

    def __iter__(self) -> Iterator[Delivery]:
        plan = self.dataset.plan()
        order = plan.loader_order()
        workers = sorted({w for w, _b in order})
        queues = {w: queue.Queue(maxsize=self.prefetch_factor) for w in workers}
        self.queues = queues
        self.gate.want = order[0][0] if order else None  # the stream of the next batch
        stop = threading.Event()

        def produce(w: int) -> None:
            q = queues[w]
            try:
                batches = self.dataset.stream(w)
                while True:
                    with self.gate.enter(w):
                        batch = next(batches, _END)
                    if batch is _END:
                        break
                    while not stop.is_set():
                        try:
                            q.put(batch, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                item: Any = _END
            except BaseException as exc:  # handed to the consumer, raised there
                item = _Failed(exc)
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue

        threads = [
            threading.Thread(target=produce, args=(w,), name=f"wdstool-decode-{w}", daemon=True)
            for w in workers
        ]
        for t in threads:
            t.start()
        try:
            for i, (w, _b) in enumerate(order):
                item = queues[w].get()
                if isinstance(item, _Failed):
                    raise item.exc
                if item is _END:
                    raise RuntimeError(f"internal error: decode thread {w} ended early")
                if i + 1 < len(order):  # where the batch after this one will come from
                    self.gate.want = order[i + 1][0]
                yield item
        finally:
            stop.set()
            for q in queues.values():  # unblock producers waiting on a full queue
                while True:
                    try:
                        q.get_nowait()
                    except queue.Empty:
                        break
            for t in threads:
                t.join(timeout=30)
