"""Counting someone else's shards, a batch at a time: from img2dataset's side files where they
are, else from the tars' headers.

A :class:`CountBatch` is a picklable work item (any ``concurrent.futures.Executor`` runs it:
threads here, Ray tasks on a cluster, ``shard_writer.count_parts``). Each of its shards is
counted one of two ways:

- **side files** (``wdstool.format.img2dataset``): ``NAME.parquet``'s footer and its ``key``
  and ``status`` chunks by ranged reads, checked against ``NAME_stats.json``: 2-4 requests and
  tens of KB a shard, the tar never opened;
- **header scan** (``wdstool.format.tar_index``): the tar's headers, member data skipped (on a
  store, pieces of ``WALK_PAGE``: a request per 4 MB and about the whole tar's bytes), which
  also gives each sample's offset (kept: a reader that splits the shard starts at its sample).

Shards marked ``check`` are counted both ways, and a shard whose side files and tar disagree
(another count, another key) is a ShardError naming it: side files are trusted only where a
sample of the tars says they describe them. Every read is counted (requests, bytes), so a run
says what counting cost.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from wdstool.base.errors import ShardError
from wdstool.base.objects import Missing, object_size, read_range
from wdstool.base.remote import WALK, open_shard, set_page
from wdstool.base.urls import is_remote, local_path
from wdstool.format.img2dataset import read_side, side_files
from wdstool.format.tar_index import sample_spans

THREADS = 16  # shards counted at once in a batch (each a few small requests at a time)


class CountBy(StrEnum):
    AUTO = "auto"  # side files where a shard has them, else its headers
    SIDE = "side-files"  # side files, an error naming a shard without them
    SCAN = "scan"  # every tar's headers


@dataclass(frozen=True)
class Listed:
    """What a listing said of a shard's files: the tar's size and its Parquet's (-1: not
    there; None: not listed, asked for by a HEAD) and whether its stats file is there."""

    tar_size: int = -1
    parquet_size: int | None = None
    stats: bool | None = None


@dataclass(frozen=True)
class CountBatch:
    """Shards ``first .. first + len(urls)`` of a data set, to count ``how``; ``check``: the
    shards also scanned to check their side files."""

    index: int
    first: int
    urls: tuple[str, ...]
    listed: tuple[Listed, ...]
    check: tuple[bool, ...]
    how: CountBy = CountBy.AUTO
    storage_options: dict[str, Any] | None = field(default=None, compare=False)

    def run(self) -> BatchCount:
        cost = _Cost()
        threads = max(1, min(THREADS, len(self.urls)))
        with ThreadPoolExecutor(threads) as pool:
            shards = list(pool.map(lambda i: self._one(i, cost), range(len(self.urls))))
        offsets = [s[2] for s in shards]
        return BatchCount(
            index=self.index,
            nsamples=np.array([s[0] for s in shards], dtype=np.int64),
            filesize=np.array([s[1] for s in shards], dtype=np.int64),
            scanned=np.array([o is not None for o in offsets], dtype=bool),
            offsets=np.concatenate([np.asarray(o, np.uint64) for o in offsets if o is not None])
            if any(o is not None for o in offsets)
            else np.zeros(0, np.uint64),
            sides=int(sum(s[3] for s in shards)),
            checked=int(sum(s[3] and s[2] is not None for s in shards)),
            requests=cost.requests,
            bytes=cost.bytes,
        )

    def _one(self, i: int, cost: _Cost) -> tuple[int, int, tuple[int, ...] | None, bool]:
        """(samples, tar size, offsets where its headers were read, whether its side files
        counted it) of shard ``i``."""
        url, listed, opts = self.urls[i], self.listed[i], self.storage_options
        side = None
        if self.how is not CountBy.SCAN:
            side = _side(url, listed, opts, cost)
            if side is None and self.how is CountBy.SIDE:
                raise ShardError(
                    f"{url}: no {side_files(url)[0].rsplit('/', 1)[-1]} beside it: count by "
                    "the tars' headers (count_by='auto' or 'scan')"
                )
        if side is not None and not self.check[i]:
            return side.nsamples, listed.tar_size, None, True
        keys, offsets, size = _scan(url, opts, cost)
        if side is not None and sorted(side.keys) != sorted(keys):
            only = sorted(set(side.keys) ^ set(keys))
            raise ShardError(
                f"{url}: its side files are not this tar's: {side_files(url)[0]} lists "
                f"{side.nsamples} samples, the tar holds {len(keys)}"
                + (f" (key {only[0]!r} is in one only)" if only else "")
                + "; count it by its headers (count_by='scan')"
            )
        return len(keys), size if size >= 0 else listed.tar_size, offsets, side is not None


@dataclass(frozen=True)
class BatchCount:
    """What a batch found: per shard its samples and tar size (-1: not known), whether its
    headers were read (then its offsets are in ``offsets``, shard after shard), and how
    counting went (shards counted from side files, of which ``checked`` against their tar
    too; requests and bytes, on a store)."""

    index: int
    nsamples: np.ndarray
    filesize: np.ndarray
    scanned: np.ndarray
    offsets: np.ndarray
    sides: int = 0
    checked: int = 0
    requests: int = 0
    bytes: int = 0


class _Cost:
    """Requests and bytes, summed over a batch's threads."""

    def __init__(self) -> None:
        self.requests = self.bytes = 0
        self._lock = threading.Lock()

    def add(self, requests: int, nbytes: int) -> None:
        with self._lock:
            self.requests += requests
            self.bytes += nbytes


def _reader(opts: dict[str, Any] | None, cost: _Cost) -> Callable[[str, int, int], bytes]:
    """Ranged reads, counted on a store (a local file's are free)."""

    def read(url: str, a: int, b: int) -> bytes:
        if is_remote(url):
            data = read_range(url, opts, a, b)
            cost.add(1, len(data))
            return data
        with open(local_path(url), "rb") as f:
            f.seek(a)
            return f.read(b - a)

    return read


def _side(url: str, listed: Listed, opts: dict[str, Any] | None, cost: _Cost) -> Any:
    """The shard's side-file count, or None where it has no Parquet beside it."""
    parquet, stats = side_files(url)
    size = listed.parquet_size
    remote = is_remote(parquet)
    if size is None:  # not listed: a HEAD
        try:
            size = object_size(parquet, opts) if remote else _local_size(parquet)
        except (Missing, FileNotFoundError):
            size = -1
        cost.add(int(remote), 0)
    if size < 0:
        return None
    data = None
    if listed.stats is not False:
        try:
            data = read_range(stats, opts) if remote else _local_bytes(stats)
        except (Missing, FileNotFoundError):
            cost.add(int(remote), 0)
        else:
            cost.add(int(remote), len(data) if remote else 0)
    return read_side(url, size, _reader(opts, cost), data)


def _local_size(path: str) -> int:
    return os.path.getsize(local_path(path))


def _local_bytes(path: str) -> bytes:
    with open(local_path(path), "rb") as f:
        return f.read()


def _scan(
    url: str, opts: dict[str, Any] | None, cost: _Cost
) -> tuple[list[str], tuple[int, ...], int]:
    """The keys and offsets of a tar's samples from its headers, and its size."""
    stats: dict[str, int] = {}
    with open_shard(url, opts, local_buffer=0, stats=stats) as f:
        set_page(f, WALK)
        spans = list(sample_spans(f, url))
        raw = getattr(f, "raw", f)
        size = raw.size() if callable(getattr(raw, "size", None)) else None
    if size is None and not is_remote(url):
        size = os.path.getsize(local_path(url))
    cost.add(stats.get("requests", 0), stats.get("bytes", 0))
    return [s.key for s in spans], tuple(s.start for s in spans), -1 if size is None else size


__all__ = ["BatchCount", "CountBatch", "CountBy", "Listed"]
