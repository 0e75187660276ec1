"""Counting batches (``shard_writer.foreign_count``) run on any executor, each finished batch
kept in a work folder: a run killed part way (a node lost, Ctrl-C, a spot instance taken back)
goes on where it stopped, and the driver never holds every sample's offset in memory.

A batch's part is ``part-NNNNNN.npz`` (its counts, sizes, which shards were scanned and their
offsets, what it cost) beside a line of JSON naming the batch (a digest of its shards, how they
were counted and which were checked), written to a temporary name and renamed: a part is whole
or absent, and a part of another batch (the sources or options changed) is counted again.
``progress(shards_done, shards)`` is called as parts are found and as batches finish.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from pathlib import Path

import numpy as np

from shard_writer.foreign_count import BatchCount, CountBatch

PARTS_VERSION = 1
Progress = Callable[[int, int], object]


def batch_key(batch: CountBatch) -> str:
    """What a part must name to be this batch's."""
    h = hashlib.sha256(f"{PARTS_VERSION}\0{batch.first}\0{batch.how.value}\n".encode())
    for url, checked in zip(batch.urls, batch.check, strict=True):
        h.update(f"{url}\0{int(checked)}\n".encode())
    return h.hexdigest()[:32]


def _path(work: Path, batch: CountBatch) -> Path:
    return work / f"part-{batch.index:06d}.npz"


def save_part(work: Path, batch: CountBatch, got: BatchCount) -> None:
    """Keep ``got`` as ``batch``'s part (whole or not at all)."""
    path = _path(work, batch)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    meta = {"key": batch_key(batch), "sides": got.sides, "checked": got.checked}
    meta.update(requests=got.requests, bytes=got.bytes)
    with open(tmp, "wb") as f:
        np.savez(
            f,
            meta=np.array(json.dumps(meta)),
            nsamples=got.nsamples,
            filesize=got.filesize,
            scanned=got.scanned,
            offsets=got.offsets,
        )
    os.replace(tmp, path)


def load_part(work: Path, batch: CountBatch, offsets: bool = False) -> BatchCount | None:
    """``batch``'s part, where a whole one is kept (``offsets``: with the samples' offsets,
    else an empty array in their place)."""
    try:
        with np.load(_path(work, batch), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("key") != batch_key(batch):
                return None
            got = BatchCount(
                index=batch.index,
                nsamples=z["nsamples"],
                filesize=z["filesize"],
                scanned=z["scanned"],
                offsets=z["offsets"] if offsets else np.zeros(0, np.uint64),
                sides=int(meta["sides"]),
                checked=int(meta["checked"]),
                requests=int(meta["requests"]),
                bytes=int(meta["bytes"]),
            )
    except (OSError, ValueError, KeyError, EOFError):
        return None
    if len(got.nsamples) != len(batch.urls):
        return None
    return got


def _count(batch: CountBatch) -> BatchCount:
    """A batch counted where the executor runs it (a Ray task's name says ``_count``)."""
    return batch.run()


def run_counts(
    batches: Sequence[CountBatch],
    pool: Executor | None,
    work: Path,
    progress: Progress | None = None,
) -> tuple[list[BatchCount], int]:
    """Every batch's count (without offsets: :func:`load_part` reads them back), from its
    part where one is kept, else counted on ``pool`` (None: here, one after another) and
    kept; and how many parts were found kept. The first error cancels what is queued and is
    raised."""
    work.mkdir(parents=True, exist_ok=True)
    total = sum(len(b.urls) for b in batches)
    found: dict[int, BatchCount] = {}
    for b in batches:
        part = load_part(work, b)
        if part is not None:
            found[b.index] = part
    done = sum(len(b.urls) for b in batches if b.index in found)
    if progress is not None:
        progress(done, total)
    todo = [b for b in batches if b.index not in found]
    kept = len(found)

    def finished(b: CountBatch, got: BatchCount) -> None:
        nonlocal done
        save_part(work, b, got)
        found[b.index] = _without_offsets(got)
        done += len(b.urls)
        if progress is not None:
            progress(done, total)

    if pool is None:
        for b in todo:
            finished(b, _count(b))
    else:
        futures: dict[Future[BatchCount], CountBatch] = {pool.submit(_count, b): b for b in todo}
        try:
            while futures:
                ready, _ = wait(futures, return_when=FIRST_COMPLETED)
                for fut in ready:
                    finished(futures.pop(fut), fut.result())
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    return [found[b.index] for b in batches], kept


def _without_offsets(got: BatchCount) -> BatchCount:
    from dataclasses import replace

    return replace(got, offsets=np.zeros(0, np.uint64))


__all__ = ["batch_key", "load_part", "run_counts", "save_part"]
