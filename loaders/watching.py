"""What ``StreamingLoader`` offers for watching it train: ``stats()``, ``diagnose()``,
``watch(exporter, ...)``; and how full its prefetch queue is (``ready_probe``)."""

from __future__ import annotations

import os
from typing import Any

from loaders.monitor.autotune import Autotuner
from loaders.monitor.stats import LoaderStats
from loaders.monitor.verdict import Verdict, diagnose
from loaders.threads import ThreadedBatches


class Watching:
    """The watching half of :class:`loaders.loader.StreamingLoader` (its ``meter``,
    ``exporters`` and ``autotuner``)."""

    meter: Any
    exporters: list[Any]
    autotuner: Autotuner | None

    # --- watching ------------------------------------------------------------------------
    def stats(self, memory: bool = True) -> LoaderStats:
        """What the loader did: the epoch so far and the last steps (``loaders.monitor.stats``),
        the settings in force, the memory of its processes and the host (``memory=False``:
        not read; reading it takes ~6 ms a process). The counting itself is always on unless
        ``make_loader(stats=False)``."""
        if self.meter is None:
            raise RuntimeError("this loader was made with stats=False")
        w = self.config.workers
        return self.meter.stats(
            self.pids() if memory else None,
            epoch=self.epoch,
            rank=self.topology.rank,
            step=self.batches_delivered,
            workers=(
                self.autotuner.active(self)
                if self.autotuner is not None
                else self.topology.num_workers
            ),
            worker_mode=w.mode.value,
            prefetch_factor=w.prefetch_factor,
            autotune=self.autotuner.last if self.autotuner is not None else "",
        )

    def diagnose(self, window: str = "recent") -> Verdict:
        """Is training waiting for this loader, and if so, why: a :class:`Verdict` whose
        ``str()`` is one line ("input-bound 34% of steps: decode 61% of worker time, ...").
        ``window``: ``"recent"`` (the last steps) or ``"epoch"`` (the epoch so far)."""
        return diagnose(self.stats(memory=False), window=window)

    def pids(self) -> list[int]:
        """This process and its worker processes (those of the pass running or the persistent
        ones), whose memory is the loader's."""
        it = getattr(self, "_live", None)
        if it is None:
            it = getattr(self.dataloader, "_iterator", None)
        workers = getattr(it, "_workers", None) or []
        return [os.getpid(), *(w.pid for w in workers if w.pid is not None and w.is_alive())]

    def watch(self, *exporters: Any) -> Any:
        """Report the stats as batches go by: each exporter (``loaders.monitor``:
        ``LogExporter``, ``TensorBoardExporter``, ``PrometheusExporter``,
        ``CallbackExporter``) is called every ``exporter.every`` steps and at the end of each
        epoch. Returns the loader."""
        if self.meter is None:
            raise RuntimeError("this loader was made with stats=False: nothing to watch")
        for e in exporters:
            e.attach(self)
            self.exporters.append(e)
        return self

    def _watch(self) -> None:
        step = self.batches_delivered
        last = step == self.dataset.remaining_batches()
        for e in self.exporters:
            if step % e.every == 0 or last:
                e.export(self, step)
        if self.autotuner is not None:
            self.autotuner.step(self, step)


def ready_probe(it: Any, source: Any, workers: Any) -> Any:
    """A function giving (the share of the prefetch queue that holds ready batches, whether
    the batch the loop asks for next is among them): in torch's DataLoader iterator, batches
    received out of order and those in its result queue (one there may be in flight: counted
    as ready); with decode threads, their queues and the next one's."""
    capacity = max(1, workers.num_workers * workers.prefetch_factor)
    if isinstance(source, ThreadedBatches):  # decode threads

        def ready_threads() -> tuple[float, bool]:
            n = sum(q.qsize() for q in source.queues.values())
            nxt = source.queues.get(source.gate.want)  # type: ignore[arg-type]
            return min(1.0, n / capacity), nxt is not None and nxt.qsize() > 0

        return ready_threads
    data, info = getattr(it, "_data_queue", None), getattr(it, "_task_info", None)
    if data is None or info is None:  # no workers: nothing is ever ready ahead
        return lambda: (0.0, False)

    def ready() -> tuple[float, bool]:
        try:
            held = sum(1 for v in info.values() if len(v) == 2)
            queued = data.qsize()
        except (NotImplementedError, RuntimeError):  # qsize where the platform has none
            return 0.0, False
        nxt = info.get(getattr(it, "_rcvd_idx", -1))
        return min(1.0, (queued + held) / capacity), queued > 0 or (
            nxt is not None and len(nxt) == 2
        )

    return ready


__all__ = ["Watching", "ready_probe"]
