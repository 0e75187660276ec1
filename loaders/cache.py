"""A local cache of remote shards, shared safely by every worker and rank on one host.

- **Names**: ``<cache_dir>/<scheme>/<bucket>/<full key>``, each path segment percent-encoded, plus
  ``.<sha256 prefix>`` when the manifest gives the shard's hash. Two shards with the same base
  name in different prefixes or buckets never collide (webdataset's cache keys on the base name),
  and a re-packed shard gets a new name instead of serving stale bytes.
- **One download per host, followed by every reader**: the first reader of a shard takes the
  entry's ``flock`` and starts a background download into a temporary file at network speed;
  it and every other reader of that shard on the host (other workers, other ranks) read the
  temporary file as it grows, so a shard read by two ranks of a node at once is fetched once.
  When the download is complete and its size checks out, it is renamed into place (a partial
  download is never under the final name). If the download stops short (its process died, the
  store failed), readers go on from the store at the byte they reached.
- **LRU with a byte limit**: a hit refreshes the entry's mtime; after each new entry, the oldest
  entries are removed until the total fits ``cache_limit`` (under a cache-wide lock). A reader
  holding an evicted file open keeps reading it (POSIX unlink semantics). Locks and temporary
  files live in ``<cache_dir>/.work/``; a killed reader's temporary is removed at the next
  eviction (its entry lock is free by then) or overwritten by the next fill.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, BinaryIO

from wdstool.base import counters
from wdstool.base.errors import StorageError

log = logging.getLogger(__name__)
WORK = ".work"  # locks and partial downloads, outside the entries' tree
FILL_CHUNK = 1 << 20
POLL = 0.002  # a reader that caught up with a fill checks again after this long
STALL_TIMEOUT = 120.0  # no new byte from a fill this long: read from the store instead


def _segment(s: str) -> str:
    q = urllib.parse.quote(s, safe="-_.~=+,@")
    return {"": "%00", ".": "%2E", "..": "%2E%2E"}.get(q, q)


class ShardCache:
    def __init__(self, root: str | os.PathLike[str], limit: int | None = None) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.limit = limit
        self.work = os.path.join(self.root, WORK)
        os.makedirs(self.work, exist_ok=True)

    def __repr__(self) -> str:
        return f"ShardCache({self.root!r}, limit={self.limit})"

    # naming -------------------------------------------------------------------------------
    def entry_path(self, url: str, version: str | None = None) -> str:
        scheme, _, rest = url.partition("://")
        parts = [_segment(scheme.lower() or "file")] + [_segment(p) for p in rest.split("/")]
        if version:
            parts[-1] += f".{version[:16]}"
        return os.path.join(self.root, *parts)

    # reading ------------------------------------------------------------------------------
    def lookup(self, url: str, version: str | None = None, size: int | None = None) -> str | None:
        """The cached file for ``url``, or None. A hit counts as a use (LRU)."""
        path = self.entry_path(url, version)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        if size is not None and st.st_size != size:
            log.warning("%s: cached copy has %d bytes, expected %d; ignored", url, st.st_size, size)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return None
        with contextlib.suppress(FileNotFoundError):
            os.utime(path)
        return path

    def open(
        self,
        url: str,
        remote: BinaryIO,
        *,
        reopen: Callable[[], BinaryIO] | None = None,
        version: str | None = None,
        size: int | None = None,
    ) -> BinaryIO:
        """Read ``url`` through the cache: a local file on a hit; otherwise ``remote`` (a reader
        of the whole object from byte 0), teed into the cache when this reader may fill it."""
        hit = self.lookup(url, version, size)
        counters.count("cache_hits" if hit is not None else "cache_misses")
        if hit is not None:
            remote.close()
            return open(hit, "rb", buffering=1 << 20)
        if size is not None and self.limit is not None and size > self.limit:
            return remote
        path = self.entry_path(url, version)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lock_fd = os.open(self._work_path(path, ".lock"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another reader is filling this entry: follow its download
            os.close(lock_fd)
            follow = _Follow(self, url, path, lambda: remote, size)
            return io.BufferedReader(follow, buffer_size=1 << 20)  # type: ignore[return-value]
        if os.path.exists(path):  # filled between our lookup and the lock
            os.close(lock_fd)
            remote.close()
            return open(path, "rb", buffering=1 << 20)
        _Fill(self, remote, path, self._work_path(path, ".part"), lock_fd, size)
        follow = _Follow(self, url, path, reopen or _no_store(url), size)
        return io.BufferedReader(follow, buffer_size=1 << 20)  # type: ignore[return-value]

    def _work_path(self, entry: str, suffix: str) -> str:
        digest = hashlib.sha1(entry.encode("utf-8", "surrogateescape")).hexdigest()
        return os.path.join(self.work, digest + suffix)

    # eviction -----------------------------------------------------------------------------
    def entries(self) -> list[tuple[float, int, str]]:
        """(mtime, size, path) of every complete entry."""
        out = []
        for dirpath, dirs, files in os.walk(self.root):
            if dirpath == self.root:
                dirs[:] = [d for d in dirs if d != WORK]
            for name in files:
                p = os.path.join(dirpath, name)
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(p)
                    out.append((st.st_mtime, st.st_size, p))
        return out

    def total_bytes(self) -> int:
        return sum(size for _m, size, _p in self.entries())

    def evict(self, keep: str | None = None) -> int:
        """Remove least recently used entries until the total fits the limit; remove stale
        temporaries. Returns the bytes freed."""
        with _locked(os.path.join(self.work, "evict.lock")):
            self._remove_stale_parts()
            if self.limit is None:
                return 0
            entries = sorted(self.entries())
            total = sum(size for _m, size, _p in entries)
            freed = 0
            for _mtime, size, path in entries:
                if total <= self.limit:
                    break
                if path == keep:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                    total -= size
                    freed += size
                    counters.count("cache_evictions")
            return freed

    def _remove_stale_parts(self) -> None:
        for name in os.listdir(self.work):
            if not name.endswith(".part"):
                continue
            lock_fd = os.open(os.path.join(self.work, name[:-5] + ".lock"), os.O_CREAT | os.O_RDWR)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being filled right now
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.work, name))
            finally:
                os.close(lock_fd)


@contextlib.contextmanager
def _locked(path: str):
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _no_store(url: str) -> Callable[[], BinaryIO]:
    def fail() -> BinaryIO:
        raise StorageError(f"{url}: the cache fill stopped and no second reader was given")

    return fail


class _Fill:
    """Downloads one shard into its temporary file in a background thread, at network speed
    (not at the pace of whoever reads it), then checks the size and renames it into place.
    Runs only while holding the entry's lock; releases it when done, failed or abandoned."""

    def __init__(
        self,
        cache: ShardCache,
        remote: BinaryIO,
        path: str,
        tmp: str,
        lock_fd: int,
        size: int | None,
    ) -> None:
        self._cache = cache
        self._remote = remote
        self._path = path
        self._tmp = tmp
        self._lock_fd = lock_fd
        self._size = size
        self._out = open(tmp, "wb")  # noqa: SIM115 - closed by the thread
        self._thread = threading.Thread(target=self._run, name="wdstool-cache-fill", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        written = 0
        try:
            try:
                while chunk := self._remote.read(FILL_CHUNK):
                    self._out.write(chunk)
                    self._out.flush()  # followers read the file as it grows
                    written += len(chunk)
            finally:
                self._remote.close()
            expected = (
                self._size
                if self._size is not None
                else getattr(getattr(self._remote, "raw", self._remote), "size", None)
            )
            self._out.close()
            if expected is not None and written != expected:
                log.warning(
                    "%s: got %d bytes, expected %d; not cached", self._path, written, expected
                )
                os.unlink(self._tmp)
                return
            os.replace(self._tmp, self._path)
            self._cache.evict(keep=self._path)
        except Exception as exc:  # the followers fall back to the store and report errors there
            log.warning("%s: cache fill stopped (%s); not cached", self._path, exc)
            self._out.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp)
        finally:
            os.close(self._lock_fd)


class _Follow(io.RawIOBase):
    """Reads an entry while it is being filled (by this process or another): the temporary
    file as it grows, then the end when the size is reached or the fill has finished. If the
    fill stops short (its process died, the store failed), reading goes on from the store at
    the same offset. Not seekable: tar readers skip by reading (local reads, cheap)."""

    def __init__(
        self,
        cache: ShardCache,
        url: str,
        path: str,
        reopen: Callable[[], BinaryIO],
        size: int | None,
    ) -> None:
        super().__init__()
        self._path = path
        self._tmp = cache._work_path(path, ".part")
        self._lock_path = cache._work_path(path, ".lock")
        self._url = url
        self._reopen = reopen
        self._remote: BinaryIO | None = None
        self._size = size
        self._pos = 0
        self._file: BinaryIO | None = None
        self._from_store = False

    def readable(self) -> bool:
        return True

    def _filler_alive(self) -> bool:
        fd = os.open(self._lock_path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # also drops a shared lock we got
        return False

    def _open_file(self) -> bool:
        for candidate in (self._tmp, self._path):
            with contextlib.suppress(FileNotFoundError):
                self._file = open(candidate, "rb", buffering=0)  # noqa: SIM115 - closed in close()
                return True
        return False

    def _read_file(self, b: Any) -> int:
        """What the fill has written beyond our position (0: nothing yet, or no file yet)."""
        if self._file is None and not self._open_file():
            return 0
        assert self._file is not None
        n = self._file.readinto(b) or 0
        self._pos += n
        return n

    def readinto(self, b: Any) -> int:
        if self._from_store:
            assert self._remote is not None
            data = self._remote.read(len(b))
            b[: len(data)] = data
            self._pos += len(data)
            return len(data)
        if self._size is not None and self._pos >= self._size:
            return 0
        waited = 0.0
        while True:
            if n := self._read_file(b):
                return n
            if not self._filler_alive():
                # the fill ended: read what it wrote last, then decide between end and failure
                if n := self._read_file(b):
                    return n
                if os.path.exists(self._path) and (
                    self._size is None or self._pos == os.path.getsize(self._path)
                ):
                    return 0
                return self._fall_back(b)
            if waited > STALL_TIMEOUT:
                return self._fall_back(b)
            time.sleep(POLL)
            waited += POLL

    def _fall_back(self, b: Any) -> int:
        log.info(
            "%s: cache fill stopped at byte %d; reading on from the store", self._url, self._pos
        )
        if self._file is not None:
            self._file.close()
            self._file = None
        self._remote = self._reopen()
        if self._pos:
            self._remote.seek(self._pos)
        self._from_store = True
        return self.readinto(b)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._file is not None:
                self._file.close()
            if self._remote is not None:
                self._remote.close()
        finally:
            super().close()
