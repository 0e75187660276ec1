"""A local cache of remote shards, shared safely by every worker and rank on one host.

- **Names**: ``<cache_dir>/<scheme>/<bucket>/<full key>``, each path segment percent-encoded, plus
  ``.<sha256 prefix>`` when the manifest gives the shard's hash. Two shards with the same base
  name in different prefixes or buckets never collide (webdataset's cache keys on the base name),
  and a re-packed shard gets a new name instead of serving stale bytes.
- **Filled while streaming**: the first reader of a shard tees what it reads into a temporary
  file beside the entry; when the whole shard has passed (the rest is drained when the reader
  stops early) and its size checks out, the file is renamed into place. A partial download is
  never under the final name, so it is never read as complete. One reader per entry fills it
  (an exclusive ``flock``); others stream from the store meanwhile instead of waiting.
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
import urllib.parse
from typing import Any, BinaryIO

log = logging.getLogger(__name__)
WORK = ".work"  # locks and partial downloads, outside the entries' tree


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
        version: str | None = None,
        size: int | None = None,
    ) -> BinaryIO:
        """Read ``url`` through the cache: a local file on a hit; otherwise ``remote`` (a reader
        of the whole object from byte 0), teed into the cache when this reader may fill it."""
        hit = self.lookup(url, version, size)
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
        except BlockingIOError:  # another reader is filling this entry
            os.close(lock_fd)
            return remote
        if os.path.exists(path):  # filled between our lookup and the lock
            os.close(lock_fd)
            remote.close()
            return open(path, "rb", buffering=1 << 20)
        tee = _Tee(self, remote, path, self._work_path(path, ".part"), lock_fd, size)
        return io.BufferedReader(tee, buffer_size=1 << 20)  # type: ignore[return-value]

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


class _Tee(io.RawIOBase):
    """Reads ``remote`` sequentially, writing every byte to a temporary file; ``close()`` after
    a normal end drains the rest and publishes the entry. Not seekable (the tee must see every
    byte), so tar readers skip by reading."""

    def __init__(
        self,
        cache: ShardCache,
        remote: BinaryIO,
        path: str,
        tmp: str,
        lock_fd: int,
        size: int | None,
    ) -> None:
        super().__init__()
        self._cache = cache
        self._remote = remote
        self._path = path
        self._lock_fd = lock_fd
        self._size = size
        self._tmp = tmp  # only the lock holder writes it
        self._out: BinaryIO | None = open(self._tmp, "wb")  # noqa: SIM115 - closed in close()
        self._written = 0
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._remote.read(len(b))
        n = len(data)
        b[:n] = data
        if n == 0:
            self._eof = True
        elif self._out is not None:
            try:
                self._out.write(data)
                self._written += n
            except OSError as exc:  # disk full etc.: keep streaming, stop caching
                log.warning("%s: cache write failed (%s); not caching it", self._path, exc)
                self._abandon()
        return n

    def complete(self) -> None:
        """Read the rest (into the cache only) and publish the entry."""
        if self._out is None:
            return
        while not self._eof:
            chunk = self._remote.read(1 << 20)
            if not chunk:
                self._eof = True
                break
            try:
                self._out.write(chunk)
                self._written += len(chunk)
            except OSError as exc:
                log.warning("%s: cache write failed (%s); not caching it", self._path, exc)
                self._abandon()
                return
        expected = (
            self._size
            if self._size is not None
            else getattr(getattr(self._remote, "raw", self._remote), "size", None)
        )
        if expected is not None and self._written != expected:
            log.warning(
                "%s: got %d bytes, expected %d; not cached", self._path, self._written, expected
            )
            self._abandon()
            return
        self._out.close()
        self._out = None
        os.replace(self._tmp, self._path)
        self._cache.evict(keep=self._path)

    def _abandon(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._abandon()  # complete() already published, or the read did not finish
            self._remote.close()
        finally:
            os.close(self._lock_fd)
            super().close()


def complete(f: BinaryIO) -> None:
    """Call when a reader is done with a shard it read from byte 0 without error: a cache fill
    in progress is finished (the rest downloaded) and published. No-op otherwise."""
    raw = getattr(f, "raw", None)
    if isinstance(raw, _Tee):
        raw.complete()
