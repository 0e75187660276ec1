"""A worker's clock: where one stream's time went between two batches it handed off.

Kept by :class:`loaders.batch.BatchAssembler` in the DataLoader worker (or decode thread) that
produces the batches, and sent with each :class:`loaders.delivery.Delivery` as a small dict of
seconds and counts since the previous one (~20 floats a batch: nothing next to a batch's
pixels). The stages:

- ``read``: waiting for the next sample of the shuffled stream (storage, tar parsing, the
  shuffle buffer filling);
- ``decode``: the image decoder (``wdstool.format.decode``, counted there);
- ``resize``: the rest of the recipe's head (crop, resize, flip: a sample's recipe time less its
  decode and tail);
- ``tail``: the recipe's ops after the head (``loaders.recipe``, counted there);
- ``assembly``: the batch around the samples (labels, fields, normalizing into the slot);
- ``handoff``: the stream suspended after yielding a batch, until it was asked for the next
  one: torch sending it to the main process and the worker waiting for room in the prefetch
  queue (a full queue: the worker is ahead of the training loop).

``counters.timed`` costs ~0.5 us a call here (a call and two clock reads): ~2 us a sample over
its stages, against ~1.5 ms of decoding it.
"""

from __future__ import annotations

import time
from typing import Any

from wdstool.base import counters


class WorkerClock:
    """Stage seconds of one stream. ``thread``: a decode thread (its CPU time is the
    thread's) rather than a worker process (the process's, read-ahead threads included);
    ``handoff``: count the time suspended after a yield (False in the main process, where
    that time is the training step's)."""

    def __init__(self, *, thread: bool, handoff: bool = True) -> None:
        self._cpu = time.thread_time if thread else time.process_time
        self._handoff = handoff
        # what this thread counted before the stream began is not its own; nor, in a worker
        # process, the events its parent had counted when it was forked
        counters.forget(events=handoff and not thread)
        self._reset()

    @classmethod
    def for_pass(cls, stats: bool, *, thread: bool, handoff: bool) -> WorkerClock | None:
        """The clock of a stream's pass, or None with ``stats`` off (``make_loader(stats=
        False)``: the process's stage clocks, ``counters.enabled``, are switched off too)."""
        counters.enabled = stats
        return cls(thread=thread, handoff=handoff) if stats else None

    def _reset(self) -> None:
        self.wall0, self.cpu0 = time.perf_counter(), self._cpu()
        self.handoff = 0.0

    def suspended(self, seconds: float) -> None:
        """The stream was suspended ``seconds`` after handing off a batch."""
        if self._handoff:
            self.handoff += seconds
        else:  # the training step ran meanwhile: not this stream's time
            self.wall0 += seconds
            self.cpu0 = self._cpu()

    def report(self, samples: int) -> dict[str, Any]:
        """Seconds and counts since the last report (reset): the thread's stage seconds
        (``read`` and ``sample``, kept by the batch assembler through ``counters.timed``;
        ``decode``, ``tail``), the process's events, and this clock's own."""
        now, cpu = time.perf_counter(), self._cpu()
        out = counters.take()
        out.update(
            samples=samples,
            wall=now - self.wall0,
            cpu=cpu - self.cpu0,
            handoff=self.handoff,
        )
        self._reset()
        return out


__all__ = ["WorkerClock"]
