"""Running shard tasks: inline, in a process pool, or on Ray (any ``Executor``), with progress.

Worker processes report per-sample progress through a queue; Ray tasks report per finished
shard. The same :class:`shard_writer.write.ShardTask` runs everywhere, so every engine writes
the same bytes.
"""

from __future__ import annotations

import queue as queue_mod
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import Any

from shard_writer.options import ProgressFn
from shard_writer.write import ShardOutcome, ShardTask, write_shard

_progress_queue: Any = None


def init_worker(q: Any) -> None:
    global _progress_queue
    _progress_queue = q


def _run_task(task: ShardTask) -> ShardOutcome:
    pending = [0, 0]

    def on_sample(nbytes: int) -> None:
        pending[0] += 1
        pending[1] += nbytes
        if pending[0] >= 16 and _progress_queue is not None:
            _progress_queue.put((pending[0], pending[1]))
            pending[0] = pending[1] = 0

    outcome = write_shard(task, on_sample)
    if pending[0] and _progress_queue is not None:
        _progress_queue.put((pending[0], pending[1]))
    return outcome


def execute(
    tasks: list[ShardTask], pool: Executor | None, q: Any, progress: ProgressFn
) -> list[ShardOutcome]:
    """Write the shards, inline or in the pool; progress comes through ``q`` from workers
    (per sample), or per finished shard when there is no ``q`` (Ray tasks)."""
    if pool is None or (len(tasks) <= 1 and q is not None):
        outcomes = []
        for task in tasks:
            outcomes.append(write_shard(task, lambda n: progress(1, n, 0)))
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
