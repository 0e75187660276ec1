"""Running work items: inline, in a process pool, or on Ray (any ``Executor``), with progress.

:func:`engine` opens the executor a command's options ask for (``--workers``, ``--engine``);
pack, reshard and split all run on it. Worker processes report per-sample progress through a
queue; Ray tasks report per finished shard. A shard task is any picklable object with a
``write(on_sample)`` method returning a :class:`shard_writer.write.ShardOutcome` (pack's
:class:`shard_writer.write.ShardTask`, reshard's copy task): the same task runs everywhere, so
every engine writes the same bytes.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue as queue_mod
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

from shard_writer.options import PackSummary, ProgressFn, WriteOptions
from shard_writer.write import ShardOutcome
from wdstool.base.host import usable_cores
from wdstool.base.urls import is_remote, local_path

_progress_queue: Any = None


class WriteTask(Protocol):
    def write(self, on_sample: Callable[[int], None] | None = None) -> ShardOutcome: ...


def init_worker(q: Any) -> None:
    global _progress_queue
    _progress_queue = q


@dataclass
class Engine:
    """Where work runs: ``pool`` (None: inline), the progress queue of a process pool."""

    workers: int
    pool: Executor | None = None
    q: Any = None
    ray_start: float | None = None

    def finish(self, summary: PackSummary, probe_task: str) -> PackSummary:
        """The summary, with what a Ray run adds (CPUs, tasks per node)."""
        if self.ray_start is not None and self.pool is not None:
            pool: Any = self.pool
            summary.workers = pool.cpus()
            summary.extra = {  # beside what the command put there (an append's version...)
                **summary.extra,
                "engine": "ray",
                "ray_start_s": round(self.ray_start, 3),
                "shards_per_node": pool.tasks_per_node("_run_task"),
                "probes_per_node": pool.tasks_per_node(probe_task),
            }
        return summary


def absolute(url: str, options: WriteOptions) -> str:
    """A local path made absolute against the caller's directory for Ray: its tasks run
    wherever their node was started."""
    if options.engine != "ray" or is_remote(url):
        return url
    return os.path.abspath(local_path(url))


@contextlib.contextmanager
def engine(options: WriteOptions) -> Iterator[Engine]:
    """The executor ``options`` ask for: Ray, a spawned process pool, or none (one worker).
    On the way out by an error, queued work is cancelled."""
    workers = options.workers or usable_cores()
    if options.engine == "ray":
        from shard_writer.ray_engine import ray_executor

        started = time.perf_counter()
        with ray_executor(options.ray_address, workers) as pool:
            try:
                yield Engine(workers, pool, None, ray_start=time.perf_counter() - started)
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
        return
    if workers == 1:
        yield Engine(1)
        return
    ctx = mp.get_context("spawn")  # never fork a process that may hold threads (tqdm, s3fs)
    q = ctx.Queue()
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=init_worker, initargs=(q,)
    ) as pool:
        try:
            yield Engine(workers, pool, q)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _run_task(task: WriteTask) -> ShardOutcome:
    pending = [0, 0]

    def on_sample(nbytes: int) -> None:
        pending[0] += 1
        pending[1] += nbytes
        if pending[0] >= 16 and _progress_queue is not None:
            _progress_queue.put((pending[0], pending[1]))
            pending[0] = pending[1] = 0

    outcome = task.write(on_sample)
    if pending[0] and _progress_queue is not None:
        _progress_queue.put((pending[0], pending[1]))
    return outcome


def execute(
    tasks: Sequence[WriteTask], pool: Executor | None, q: Any, progress: ProgressFn
) -> list[ShardOutcome]:
    """Write the shards, inline or in the pool; progress comes through ``q`` from workers
    (per sample), or per finished shard when there is no ``q`` (Ray tasks)."""
    if pool is None or (len(tasks) <= 1 and q is not None):
        outcomes = []
        for task in tasks:
            outcomes.append(task.write(lambda n: progress(1, n, 0)))
            progress(0, 0, 1)
        return outcomes
    outcomes = []
    futures: set[Future[ShardOutcome]] = {pool.submit(_run_task, t) for t in tasks}
    try:
        while futures:
            done, futures = wait(futures, timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(q, progress)
            for fut in done:
                outcome = fut.result()
                outcomes.append(outcome)
                if q is None:
                    progress(outcome.nsamples, outcome.source_bytes, 1)
                else:
                    progress(0, 0, 1)
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise
    _drain(q, progress)
    return outcomes


def _drain(q: Any, progress: ProgressFn) -> None:
    while q is not None:
        try:
            n, nbytes = q.get_nowait()
        except queue_mod.Empty:
            return
        progress(n, nbytes, 0)
