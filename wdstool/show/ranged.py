"""A shard read by bounded ranges: what ``wdstool show`` reads instead of whole shards.

:class:`ShardFile` is the file object :class:`wdstool.format.tar_read.TarSampleReader` walks:
``read(n)`` fetches ``[pos, pos + max(n, READAHEAD))`` (one ranged GET on S3, ``pread``
locally), so the tar header that follows a member, a small ``.cls`` after an
image and the first bytes of the next image usually arrive with the read before them;
``seek`` moves without reading, so member data nobody asked for is never transferred. What was
fetched is kept until the shard is done (it is what the report shows, plus a few percent), so
no byte is fetched twice. Every byte fetched is counted in a :class:`ReadCounter` shared by
all shards of a report.
"""

from __future__ import annotations

import bisect
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from wdstool.base.errors import ShardError, StorageError
from wdstool.base.objects import Missing, SpanReader

READAHEAD = 4096  # a header, a small member and the next header (~1.5 KB) plus an image's head


@dataclass
class ReadCounter:
    """Bytes and requests fetched from storage, summed over threads."""

    bytes: int = 0
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.bytes += nbytes
            self.requests += 1


class ShardFile:
    """A read-only, seekable view of one shard of ``size`` bytes that fetches only the ranges
    asked for (plus ``readahead``); not thread-safe (one per shard and thread)."""

    def __init__(
        self,
        url: str,
        size: int,
        counter: ReadCounter,
        storage_options: dict[str, Any] | None = None,
        readahead: int = READAHEAD,
    ) -> None:
        self.url = url
        self.size = size
        self._counter = counter
        self._readahead = readahead
        self._pos = 0
        self._starts: list[int] = []  # fetched ranges, sorted and disjoint: where each starts
        self._chunks: list[bytes] = []  # ... and its bytes
        self._spans = SpanReader(storage_options)
        self.fetched = 0  # bytes fetched through this file

    # the file protocol TarSampleReader uses -------------------------------------------------
    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self.size}[whence]
        self._pos = base + offset
        return self._pos

    def read(self, n: int = -1) -> bytes:
        data = self.pread(self._pos, self.size - self._pos if n < 0 else n)
        self._pos += len(data)
        return data

    def close(self) -> None:
        self._spans.close()

    def __enter__(self) -> ShardFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ranged reads ---------------------------------------------------------------------------
    def pread(self, offset: int, n: int, readahead: int | None = None) -> bytes:
        """``n`` bytes at ``offset`` (fewer at the end of the shard) without moving the
        position. Every range fetched is kept, and only what no earlier read fetched is
        fetched (plus ``readahead`` past the end, the file's by default), so no byte of a
        shard is fetched twice, however the reads go back and forth."""
        ahead = self._readahead if readahead is None else readahead
        end = min(offset + n, self.size)
        if offset >= end:
            return b""
        gaps, pos = [], offset
        first = max(0, bisect.bisect_right(self._starts, offset) - 1)
        for i in range(first, len(self._starts)):
            start, data = self._starts[i], self._chunks[i]
            if start >= end:
                break
            if start + len(data) <= pos:
                continue
            if start > pos:
                gaps.append((pos, start))
            pos = max(pos, start + len(data))
        if pos < end:
            nxt = bisect.bisect_left(self._starts, pos)  # the next range held, if any
            limit = self._starts[nxt] if nxt < len(self._starts) else self.size
            gaps.append((pos, min(limit, max(end, pos + ahead))))
        for a, b in gaps:
            k = bisect.bisect_right(self._starts, a)
            self._starts.insert(k, a)
            self._chunks.insert(k, self._fetch(a, b))
        return self._slice(offset, end)

    def _slice(self, offset: int, end: int) -> bytes:
        out, pos = [], offset
        i = max(0, bisect.bisect_right(self._starts, offset) - 1)
        while pos < end:
            start, data = self._starts[i], self._chunks[i]
            if start + len(data) > pos:
                out.append(data[pos - start : end - start])
                pos = min(end, start + len(data))
            i += 1
        return out[0] if len(out) == 1 else b"".join(out)

    def _fetch(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        try:
            data = self._spans.read(self.url, start, end)
        except (Missing, FileNotFoundError):
            raise ShardError(f"{self.url}: shard not found") from None
        except OSError as exc:
            raise StorageError(f"{self.url}: cannot read: {exc.strerror or exc}") from None
        self._counter.add(len(data))
        self.fetched += len(data)
        if len(data) != end - start:
            raise ShardError(
                f"{self.url}: {len(data)} bytes at offset {start}, expected {end - start} "
                f"(the shard is shorter than the {self.size} bytes listed)"
            )
        return data
