"""How a worker opens its slice of a shard: few large requests, each byte once.

A slice is a run ``[start, stop)`` of one shard's samples. A whole shard is one streaming GET
from byte 0. A slice of a remote tar shard that starts or ends inside it (the plan cuts a
rank's share into one contiguous run per worker, so most worker boundaries fall inside a
shard) is opened by what is known of where its samples lie:

- **offsets known** (an index that lists them, the scan, or the offsets file ``pack`` writes
  beside the manifest, of which one ranged read fetches this shard's part, kept per process):
  one GET of exactly the slice's bytes, from its first sample's header to the next sample's
  (a shard's offsets are kept in the host's cache folder, so a host fetches them once);
- **offsets not known** (an index that counts samples only: timm's ``_info.json``, a wids
  index without offsets, a manifest packed before offsets were recorded): the shard is read
  through the host's cache (``loaders.cache``: one GET from byte 0 per host at network speed;
  every worker and rank of the host that reads part of it follows that download and walks its
  headers in the local copy), so each byte is fetched once per host and the walk costs no
  request (the copies are the job's, ``ShardAccess.job``, at most ``SPLIT_LIMIT`` bytes in
  all, least recently used first out); where the cache cannot take it (a shard over ``SPLIT_LIMIT``, a cache folder that
  cannot be written), the headers before the first sample are walked in pieces of a few MB
  (``wdstool.base.remote.WALK``) and the end is asked for in pieces sized to what is left.

Before (issue 53): the walk asked for 8 KB at every header, one request a sample, and the end
came in 512 KB pieces: 1,200 samples in one shard on moto took 1,157 requests and 72 s to the
first batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from loaders.cache import ShardCache
from loaders.source import DatasetIndex, ShardAccess
from loaders.source_table import cache_folder
from wdstool.base.errors import ShardError
from wdstool.base.remote import WALK, WALK_PAGE, open_shard, set_page
from wdstool.format.sample_offsets import shard_offsets
from wdstool.format.shard_formats import TAR, format_for

log = logging.getLogger(__name__)
SPLIT_LIMIT = 2 << 30  # the host's cache of shards split between readers, without cache_dir
KEPT = 64  # shards' offsets kept per process
END_MARGIN = 1.05  # a piece asks for the samples left at 1.05x the shard's mean sample size


@dataclass(frozen=True, slots=True)
class OpenedSlice:
    """A slice's stream: positioned at ``at`` (its first sample's offset), or at byte 0
    (``at`` None: the reader skips ``start`` samples by their headers). ``per_sample``: where
    the slice ends at a byte not known, the shard's mean bytes a sample, to size the pieces
    asked for (None: nothing to size)."""

    f: BinaryIO
    at: int | None
    per_sample: float | None = None


class SliceOpener:
    """Opens the slices of one source's shards for one worker (see the module docstring)."""

    def __init__(self, index: DatasetIndex, access: ShardAccess) -> None:
        self.index = index
        self.access = access
        self._kept: OrderedDict[int, tuple[int, ...] | None] = OrderedDict()
        self._firsts: np.ndarray | None = None  # each shard's first sample in the data set

    def offsets(self, shard: int) -> tuple[int, ...] | None:
        """Where each sample of ``shard`` starts: from the index, else from the offsets file
        (one ranged read, kept for the next epochs); None where neither says."""
        index = self.index
        known = index.offsets[shard] if index.offsets else None
        if known is not None or index.offsets_file is None:
            return known
        if shard in self._kept:
            self._kept.move_to_end(shard)
            return self._kept[shard]
        of = index.offsets_file
        kept = self._host_copy(shard)
        try:
            data = kept.read_bytes()
        except OSError:
            data = self._fetch(shard)
            with contextlib.suppress(OSError):  # a cache that cannot be written is no error
                kept.parent.mkdir(parents=True, exist_ok=True)
                tmp = kept.with_name(f".{kept.name}.{os.getpid()}")
                tmp.write_bytes(data)
                os.replace(tmp, kept)
        got = shard_offsets(data, of, index.size_of(shard), index.urls[shard])
        self._kept[shard] = got
        if len(self._kept) > KEPT:
            self._kept.popitem(last=False)
        return got

    def _host_copy(self, shard: int) -> Path:
        """Where the host keeps a shard's part of the offsets file: the workers of later
        epochs and the host's other ranks read it there, not from the store."""
        of = self.index.offsets_file
        assert of is not None
        key = hashlib.sha256(f"{of.name}\0{self.index.identity}".encode()).hexdigest()[:32]
        return (
            cache_folder(self.access.cache_dir) / "sample-offsets" / key / f"{shard}.{of.dtype[1:]}"
        )

    def _fetch(self, shard: int) -> bytes:
        """A shard's part of the offsets file: one ranged read."""
        index = self.index
        of = index.offsets_file
        assert of is not None
        if self._firsts is None:
            self._firsts = np.concatenate(([0], np.cumsum(index.sizes, dtype=np.int64)))
        start, end = of.span(int(self._firsts[shard]), index.sizes[shard])
        f = open_shard(of.name, self.access.storage_options, retry=self.access.retry, limit=end)
        with f:
            f.seek(start)
            data = f.read(end - start)
        if len(data) != end - start:
            raise ShardError(f"{of.name}: ends before byte {end}; the manifest says more")
        return data

    def open(self, shard: int, start: int, stop: int) -> OpenedSlice:
        """Open samples ``[start, stop)`` of ``shard`` for reading (no byte is asked for yet
        where the store is remote and no cache is involved)."""
        index, access = self.index, self.access
        url, n = index.urls[shard], index.sizes[shard]
        size, sha = index.size_of(shard), index.sha256_of(shard)
        whole = start == 0 and stop >= n
        if whole or format_for(url) is not TAR or not access.is_remote(url):
            f = access.open(url, size=size, sha256=sha)
            return OpenedSlice(f, None)
        if access.cache_dir is None:
            offsets = self.offsets(shard)
        else:  # through the loader's cache, which downloads whole shards: what the index says
            offsets = index.offsets[shard] if index.offsets else None
        if offsets is not None:
            end = offsets[stop] if stop < n else None
            f = access.open(url, size=size, sha256=sha, limit=end)
            at = offsets[start]
            if at and f.seekable():
                f.seek(at)  # before any byte is read: the GET starts here
                return OpenedSlice(f, at)
            return OpenedSlice(f, 0 if not at else None)
        if access.cache_dir is None:
            shared = self._through_host_cache(url, size, sha)
            if shared is not None:
                return OpenedSlice(shared, None)
        f = access.open(url, size=size, sha256=sha)
        per_sample = size / n if size and stop < n else None
        if start:
            set_page(f, WALK)
        elif per_sample is not None:
            set_page(f, pieces(stop - start, per_sample))
        return OpenedSlice(f, None, per_sample)

    def _through_host_cache(self, url: str, size: int | None, sha: str | None) -> BinaryIO | None:
        """``url`` read through the host's cache of split shards, or None where it cannot be."""
        if size is not None and size > SPLIT_LIMIT:
            return None
        access = self.access

        def reopen() -> BinaryIO:
            return access.open(url, size=size, sha256=sha)

        # entries are the job's (its ranks and workers share them) and the shard's checksum's
        # where known, so a shard replaced at the same URL between jobs is never served from
        # an earlier job's copy
        job = hashlib.sha256(f"{access.job}\0{sha or ''}".encode()).hexdigest()
        remote = reopen()  # no request yet: the first read sends it
        try:
            cache = ShardCache(cache_folder(None) / "split-shards", SPLIT_LIMIT)
            return cache.open(url, remote, reopen=reopen, version=job, size=size)
        except OSError as exc:
            with contextlib.suppress(Exception):
                remote.close()
            log.info("%s: not through the host cache (%s): walking headers", url, exc)
            return None


def few_shards(url: str, index: DatasetIndex, readers: int) -> str | None:
    """What to say of a remote source of fewer shards than the ``readers`` (ranks x workers)
    that read it at once; None where there is nothing to say. Each reader then reads a part of
    a shard: with the offsets ``pack`` records, one ranged request more a reader; without
    them, a download per host through its cache, and the reader after it waits for the bytes
    before its part."""
    shards = len(index.urls)
    if shards >= readers or shards == 0 or format_for(index.urls[0]) is not TAR:
        return None
    if not ShardAccess.is_remote(index.urls[0]):
        return None  # a local reader skips to its part by the headers: microseconds
    how = (
        "each reads its part with one ranged request (the offsets pack recorded)"
        if index.offsets_file is not None or index.offsets
        else "each host downloads a shared shard once and its readers wait for their part "
        "(no sample offsets: `wdstool index SOURCE --out` or a re-pack records them)"
    )
    return (
        f"{url}: {shards} shard{'s' * (shards > 1)} for {readers} readers (ranks x workers): "
        f"readers share shards, {how}; for more parallel streams, pack with a smaller "
        "--max-count or --max-size, or `wdstool reshard`"
    )


def pieces(samples_left: int, per_sample: float) -> int:
    """Bytes to ask for next where ``samples_left`` samples remain before an unknown end."""
    return max(WALK_PAGE, int(samples_left * per_sample * END_MARGIN))


__all__ = ["SPLIT_LIMIT", "OpenedSlice", "SliceOpener", "few_shards", "pieces"]
