"""Sequential reads of shards, local or remote: one streaming GET per shard, resumed where it broke.

Measured on this machine against moto's S3 server on loopback (``bench/s3_bench.py``): a single
streaming GET read in 1 MB pieces delivers ~1.1 GB/s, the same GET read in 512-byte pieces
~150 MB/s, s3fs's default read-ahead file 0.5-0.8 GB/s with one request per 5 MB block. So a
shard is read as one ``GetObject`` body behind a 1 MB buffer.

When the connection drops, stalls past the read timeout, or the store answers 5xx/503 SlowDown,
:class:`RangeReader` waits (exponential backoff, full jitter) and re-issues the GET with
``Range: bytes=<offset already consumed>-`` and ``If-Match: <ETag of the first response>``: no
byte is lost or delivered twice, and an object replaced meanwhile is an error, not a silent mix
of two versions. When the retries run out (``RetryPolicy.attempts`` tries in a row with no
progress), the error names the URL, the byte offset and the last cause.

http(s):// and hf:// URLs get the same reader over :func:`wdstool.base.web.web_opener` (a GET
from the offset, validated, with its own read timeout). Other fsspec URLs (``memory://``,
``gs://``, ...) get it over ``fs.open`` + seek.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from wdstool.base import counters
from wdstool.base.credentials import redact
from wdstool.base.errors import ShardError, StorageError
from wdstool.base.opened import Body, Opened, Opener
from wdstool.base.retry import DEFAULT_RETRY, RetryPolicy, TransientError, describe, is_retryable
from wdstool.base.s3 import cached_s3_client
from wdstool.base.urls import is_remote, is_s3, local_path, split_s3
from wdstool.base.web import is_web, web_opener

log = logging.getLogger(__name__)
BUFFER = 1 << 20
LOCAL_BUFFER = 1 << 20
SEEK_BY_READING = 4 << 20  # forward seeks up to this are read through; longer ones re-open
# A reader that walks a tar's headers (``page=WALK``) asks for WALK_PAGE bytes at a time and
# finds the headers in what came, so a walk over small members is a few large requests, never
# one a member: every request costs a round trip (S3: 20-50 ms to the first byte, ~100 MB/s a
# connection, so ~3 MB could have come meanwhile; moto on loopback ~60 ms a request). A header
# past the piece asked for starts the next piece there. After a jump over a member larger than
# a piece (videos), the next request asks for HEADER_PAGE only: the header, the small members
# after it and the next sample's headers. Measured (issue 53, 1,200 JPEGs of 105 KB in one
# shard, 2 workers, moto): 8 KB pages at every header, 1,157 requests and 72 s to the first
# batch; read in pieces of WALK_PAGE, 0.9 s.
HEADER_PAGE = 8 << 10
WALK_PAGE = 4 << 20
WALK = -1  # ``page=WALK``: pieces of WALK_PAGE, or HEADER_PAGE after a jump over a large member


class RangeReader(io.RawIOBase):
    """A read-only, forward-seekable raw stream over ``opener`` that survives dropped connections.

    ``stats`` (optional dict) counts ``requests``, ``retries`` and ``bytes``.

    ``page`` (settable at any time; None by default): bytes asked for per request from the next
    request on, where the store honours ranges. A reader whose last sample ends at an unknown
    byte asks for pieces, so that at most a piece is fetched past it (an open-ended GET left
    part read is filled by the server up to the socket buffers: ~4 MB on loopback); a reader
    skipping samples by their headers asks for ``WALK`` (see ``WALK_PAGE``). A forward seek
    inside the piece asked for reads through; past it, the next piece starts at the target.
    """

    def __init__(
        self,
        url: str,
        opener: Opener,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        size: int | None = None,
        stats: dict[str, int] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        limit: int | None = None,
    ) -> None:
        """``limit``: nothing at or past this offset is read, nor asked of the store (a reader
        that needs a shard's first samples only: the GET's range ends there)."""
        super().__init__()
        self.url = url
        self._opener = opener
        self._retry = retry
        self._size = size
        self._limit = limit
        self._version: str | None = None
        self._body: Body | None = None
        self._pos = 0
        self.page: int | None = None
        self._jump = 0  # the last forward seek's length (a walk's page follows it)
        self._end: int | None = None  # where the open request's body ends (None: it runs on)
        self._paged = True  # the store's bodies stop where asked (pieces are possible)
        self._rereads = False  # a new request reads the object from byte 0 again
        self._sleep = sleep
        self.stats = stats if stats is not None else {}

    # io.RawIOBase -------------------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    @property
    def size(self) -> int | None:
        return self._size

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            target = self._pos + offset
        elif whence == io.SEEK_SET:
            target = offset
        else:
            if self._size is None:
                self._ensure_open()
            if self._size is None:
                raise OSError(f"{self.url}: size unknown, cannot seek from the end")
            target = self._size + offset
        if target < 0:
            raise ValueError(f"negative seek position {target}")
        if target == self._pos:
            return target
        self._jump = target - self._pos
        if self._body is not None and target > self._pos and self._reads_through(target):
            sink = bytearray(min(BUFFER, target - self._pos))
            while self._pos < target:
                n = self.readinto(memoryview(sink)[: min(len(sink), target - self._pos)])
                if not n:
                    break
            return self._pos
        self._drop_body(done=True)
        self._pos = target
        return target

    def _reads_through(self, target: int) -> bool:
        """Is a forward seek to ``target`` cheaper read through the open body than opened anew?"""
        if self._rereads:
            return True  # a new request would read the object again from byte 0
        if self._end is not None:
            return target <= self._end  # inside what was asked for: those bytes come anyway
        return target - self._pos <= SEEK_BY_READING

    def readinto(self, b: Any) -> int:
        want = len(b)
        if self._limit is not None:
            want = min(want, self._limit - self._pos)
        if want <= 0 or (self._size is not None and self._pos >= self._size):
            return 0
        failures = 0
        last: BaseException | None = None
        # seconds without a byte since this read began, counting what ``sleep`` was asked as
        # well (a test's sleep does not advance the clock)
        quiet_since, waited = time.monotonic(), 0.0
        while True:
            try:
                if self._end is not None and self._pos >= self._end:
                    self._drop_body(done=True)  # a piece read to its end: the next one
                self._ensure_open()
                assert self._body is not None
                data = self._body.read(
                    want if self._end is None else min(want, self._end - self._pos)
                )
                end = (
                    self._size
                    if self._limit is None or self._size is None
                    else min(self._size, self._limit)
                )
                if not data and (end is None or self._pos < end):
                    if self._size is None:
                        return 0
                    raise TransientError(f"connection ended at byte {self._pos} of {self._size}")
                n = len(data)
                b[:n] = data
                self._pos += n
                self.stats["bytes"] = self.stats.get("bytes", 0) + n
                counters.count("network_bytes", n)
                return n
            except (ShardError, StorageError):
                self._drop_body()
                raise
            except Exception as exc:
                self._drop_body()
                if not is_retryable(exc):
                    raise StorageError(
                        f"{self.url}: read failed at byte offset {self._pos}: {describe(exc)}"
                    ) from None
                failures += 1
                last = exc
                self.stats["retries"] = self.stats.get("retries", 0) + 1
                counters.count("retries")
                quiet = max(time.monotonic() - quiet_since, waited)
                if self._retry.exhausted(failures, quiet):
                    raise StorageError(
                        f"{self.url}: giving up at byte offset {self._pos} after {failures} "
                        f"attempts over {quiet:.0f} s: {describe(last)}"
                    ) from None
                delay = self._retry.delay(failures)
                waited += delay
                log.info(
                    "%s: %s at byte %d; retrying in %.2f s (try %d, %.0f s without data)",
                    self.url,
                    describe(exc),
                    self._pos,
                    delay,
                    failures,
                    quiet,
                )
                self._sleep(delay)

    def close(self) -> None:
        self._drop_body(done=True)
        super().close()

    # internals ----------------------------------------------------------------------------
    def _ensure_open(self) -> None:
        if self._body is not None:
            return
        end = self._limit
        page = self.page
        if page == WALK:
            page = HEADER_PAGE if self._jump > WALK_PAGE else WALK_PAGE
        if page is not None and self._paged:
            end = self._pos + page if end is None else min(end, self._pos + page)
        opened = self._opener(self._pos, self._version, end)
        self.stats["requests"] = self.stats.get("requests", 0) + 1
        counters.count("requests")
        self._body = opened.body
        self._end = end if opened.bounded and end != self._limit else None
        self._paged = self._paged and opened.bounded
        self._rereads = self._rereads or opened.rereads
        if self._version is None:
            self._version = opened.version
        if opened.size is not None:
            if self._size is not None and opened.size > self._size:
                self._drop_body()
                raise ShardError(
                    f"{self.url}: is {opened.size} bytes, expected {self._size} (the manifest "
                    "and the store disagree: re-pack, or run `wdstool verify`)"
                )
            if self._size is not None and opened.size < self._size and self._version is None:
                # cut short: what is there is read, and the reader names where it ends
                log.warning(
                    "%s: is %d bytes, the index says %d: reading what is there",
                    self.url,
                    opened.size,
                    self._size,
                )
            self._size = opened.size

    def _drop_body(self, done: bool = False) -> None:
        """Let the open body go: ``done``, nothing went wrong (a body that can ``finish`` reads
        out a short rest and keeps its connection); else it is closed, its connection with it."""
        body, self._body, self._end = self._body, None, None
        if body is not None:
            # a broken connection may fail to close; it is dropped anyway
            with contextlib.suppress(Exception):
                finish = getattr(body, "finish", None) if done else None
                (finish or body.close)()


def set_page(f: Any, page: int | None) -> bool:
    """Ask a shard opened by :func:`open_shard` for ``page`` bytes per request from its next
    request on (None: up to its limit or its end; see :class:`RangeReader`). False where ``f``
    is no remote reader (a local file, a cache entry): nothing to ask."""
    raw = getattr(f, "raw", None)
    if not isinstance(raw, RangeReader):
        return False
    raw.page = page
    return True


# --- openers ------------------------------------------------------------------------------
def s3_opener(url: str, storage_options: dict[str, Any] | None) -> Opener:
    """GetObject with a Range from the offset (none at 0) and If-Match on resumes."""
    bucket, key = split_s3(url)

    def open_at(offset: int, version: str | None, end: int | None = None) -> Opened:
        client = cached_s3_client(storage_options)
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if offset or end is not None:
            kwargs["Range"] = f"bytes={offset}-{'' if end is None else end - 1}"
        if version:
            kwargs["IfMatch"] = version
        try:
            resp = client.get_object(**kwargs)
        except Exception as exc:
            if is_retryable(exc):
                raise
            code = _code(exc)
            if code in ("NoSuchKey", "404", "NotFound"):
                raise ShardError(f"{url}: shard not found") from None
            if code == "InvalidRange":
                raise ShardError(f"{url}: shorter than {offset} bytes") from None
            raise StorageError(redact(f"{url}: {describe(exc)}", storage_options)) from None
        size = _total_size(resp, offset)
        return Opened(resp["Body"], size, resp.get("ETag"))

    return open_at


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str((response.get("Error") or {}).get("Code") or "")
    return ""


def _total_size(resp: dict[str, Any], offset: int) -> int | None:
    content_range = resp.get("ContentRange")  # "bytes 100-199/200"
    if content_range and "/" in content_range:
        total = content_range.rsplit("/", 1)[1]
        if total.isdigit():
            return int(total)
    length = resp.get("ContentLength")
    return offset + int(length) if length is not None else None


def fsspec_opener(url: str, storage_options: dict[str, Any] | None) -> Opener:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))

    def open_at(offset: int, version: str | None, end: int | None = None) -> Opened:
        try:
            f = fs.open(path, "rb", block_size=8 << 20)
        except FileNotFoundError:
            raise ShardError(f"{url}: shard not found") from None
        except PermissionError as exc:
            raise StorageError(f"{url}: access denied: {exc}") from None
        size = getattr(f, "size", None)
        if offset:
            f.seek(offset)
        return Opened(f, size, None, bounded=False)  # each open reads a block of its own

    return open_at


def open_remote(
    url: str,
    storage_options: dict[str, Any] | None = None,
    *,
    retry: RetryPolicy = DEFAULT_RETRY,
    size: int | None = None,
    stats: dict[str, int] | None = None,
    limit: int | None = None,
) -> BinaryIO:
    """A buffered, retrying, forward-seekable reader of a remote shard (nothing past ``limit``
    asked for, where given)."""
    if is_s3(url):
        opener = s3_opener(url, storage_options)
    elif is_web(url):
        opener = web_opener(url, storage_options, retry)
    else:
        opener = fsspec_opener(url, storage_options)
    raw = RangeReader(url, opener, retry=retry, size=size, stats=stats, limit=limit)
    return io.BufferedReader(raw, buffer_size=BUFFER)  # type: ignore[return-value]


def open_shard(
    url: str,
    storage_options: dict[str, Any] | None = None,
    *,
    retry: RetryPolicy = DEFAULT_RETRY,
    size: int | None = None,
    stats: dict[str, int] | None = None,
    local_buffer: int = LOCAL_BUFFER,
    limit: int | None = None,
) -> BinaryIO:
    """Open a shard for sequential reading from byte 0: a local file, or :func:`open_remote`
    (no request is sent before the first read). Errors are one line naming the URL.
    ``local_buffer=0``: a local file unbuffered, so skipping data is a seek, not a read."""
    if not is_remote(url):
        try:
            return open(local_path(url), "rb", buffering=local_buffer)
        except FileNotFoundError:
            raise ShardError(f"{url}: shard not found") from None
        except PermissionError as exc:
            raise StorageError(f"{url}: access denied: {exc.strerror}") from None
        except OSError as exc:
            raise StorageError(f"{url}: cannot open shard: {exc.strerror or exc}") from None
    try:
        return open_remote(url, storage_options, retry=retry, size=size, stats=stats, limit=limit)
    except (ShardError, StorageError):
        raise
    except Exception as exc:  # bad options, unknown protocol, ...
        raise StorageError(redact(f"{url}: cannot open shard: {exc}", storage_options)) from None
