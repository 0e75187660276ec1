"""Where shards go: a local folder or any fsspec URL, with atomic publishing.

Local: a shard is written to a hidden temporary name in DEST and renamed into place.
Remote (s3://, memory://, ...): it is built in a local temporary folder, uploaded whole under its
final name (an object store's PUT is atomic; multipart above 100 MiB), then checked: its size,
and on S3 its ETag against the MD5 (single PUT) or multipart MD5 computed locally, so a corrupted
upload is caught. Either way no incomplete file ever sits under a final name.

Remote operations are retried (``wdstool.base.retry.RetryPolicy``) on transient errors; the rest
(missing bucket, denied access, rejected credentials, unreachable endpoint) become one-line
DestinationError/StorageError messages that name the URL and never contain credentials.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from wdstool.base.credentials import redact
from wdstool.base.errors import DestinationError, StorageError, WdsToolError
from wdstool.base.retry import DEFAULT_RETRY, describe, is_retryable
from wdstool.base.s3 import cached_s3_client, filesystem
from wdstool.base.urls import is_s3, split_s3

T = TypeVar("T")
STATE_DIR = ".wdstool-pack"
PART_SIZE = 50 * 2**20  # s3fs's multipart part size; objects under 2 parts go in one PUT
MAX_PARTS = 10_000


def part_size_for(size: int) -> int:
    return max(PART_SIZE, math.ceil(size / MAX_PARTS))


class ETagHasher:
    """The ETag S3 gives an object uploaded by s3fs: MD5 of the bytes for a single PUT,
    MD5 of the parts' MD5s plus ``-N`` for a multipart upload (parts of ``part_size``)."""

    def __init__(self, part_size: int = PART_SIZE) -> None:
        self.part_size = part_size
        self._whole: Any = hashlib.md5(usedforsecurity=False)
        self._parts: list[bytes] = []
        self._part = hashlib.md5(usedforsecurity=False)
        self._in_part = 0
        self.size = 0

    def update(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        self.size += len(view)
        if self._whole is not None:
            self._whole.update(view)
            if self.size >= 2 * self.part_size:
                self._whole = None  # multipart from here on
        while len(view):
            take = min(len(view), self.part_size - self._in_part)
            self._part.update(view[:take])
            self._in_part += take
            view = view[take:]
            if self._in_part == self.part_size:
                self._parts.append(self._part.digest())
                self._part = hashlib.md5(usedforsecurity=False)
                self._in_part = 0

    def etag(self) -> str:
        if self._whole is not None:
            return f'"{self._whole.hexdigest()}"'
        parts = self._parts + ([self._part.digest()] if self._in_part else [])
        combined = hashlib.md5(b"".join(parts), usedforsecurity=False).hexdigest()
        return f'"{combined}-{len(parts)}"'


def file_etag(path: str, part_size: int = PART_SIZE) -> str:
    h = ETagHasher(part_size)
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.etag()


class Destination:
    """A dataset folder or prefix. Names are relative to it (``train-000000.tar``)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/") or url
        self.storage_options = storage_options
        self.retry = DEFAULT_RETRY
        try:
            self.fs, self.root = filesystem(self.url, storage_options)
        except (ImportError, ValueError, TypeError) as exc:
            raise DestinationError(
                redact(f"{self.url}: cannot use this destination: {exc}", storage_options)
            ) from None
        self.local = "file" in (
            self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        )
        if self.local:
            self.root = os.path.abspath(self.root)
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None

    def __repr__(self) -> str:
        return f"Destination({self.url!r})"

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def display(self, name: str = "") -> str:
        """The URL users see in messages."""
        return f"{self.url}/{name}" if name else self.url

    # --- preparing -----------------------------------------------------------------------
    def ensure(self) -> None:
        """Create the folder (local) and check that it is writable."""
        if self.local:
            try:
                os.makedirs(os.path.join(self.root, STATE_DIR), exist_ok=True)
            except OSError as exc:
                raise DestinationError(
                    f"{self.url}: cannot create destination folder: {exc.strerror or exc}"
                ) from exc
            if not os.access(self.root, os.W_OK):
                raise DestinationError(f"{self.url}: destination folder is not writable")
        elif is_s3(self.url):
            # a listing (unlike HEAD) answers with an error code: NoSuchBucket, AccessDenied,
            # InvalidAccessKeyId, ... become a one-line error before any work starts
            bucket, key = split_s3(self.url)
            self._call(
                "",
                lambda: cached_s3_client(self.storage_options).list_objects_v2(
                    Bucket=bucket, Prefix=key.rstrip("/") + "/", MaxKeys=1
                ),
            )

    def _call(self, name: str, fn: Callable[[], T], missing_ok: bool = False) -> T:
        """Run a storage operation with retries; translate what is left into one line.
        FileNotFoundError passes through when ``missing_ok`` (callers test for absence)."""
        where = self.display(name)
        try:
            return self.retry.call(where, fn)
        except WdsToolError as exc:
            raise DestinationError(redact(exc.message, self.storage_options)) from None
        except FileNotFoundError:
            if missing_ok:
                raise
            raise DestinationError(
                redact(f"{where}: {describe_missing(self.url)}", self.storage_options)
            ) from None
        except Exception as exc:
            kind = StorageError if is_retryable(exc) else DestinationError
            raise kind(redact(f"{where}: {describe(exc)}", self.storage_options)) from None

    # --- reading -------------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        return self._call(name, lambda: self.fs.exists(self.path(name)))

    def info(self, name: str) -> dict[str, Any] | None:
        try:
            return self._call(name, lambda: self.fs.info(self.path(name)), missing_ok=True)
        except FileNotFoundError:
            return None

    def size(self, name: str) -> int | None:
        info = self.info(name)
        return None if info is None else int(info["size"])

    def etag(self, name: str) -> str | None:
        info = self.info(name)
        return None if info is None else (info.get("ETag") or info.get("etag"))

    def open_read(self, name: str):
        return self.fs.open(self.path(name), "rb")

    def read_bytes(self, name: str) -> bytes | None:
        """The whole file ``name``; None where there is none."""

        def read() -> bytes:
            self.fs.invalidate_cache(self.path(name))
            with self.fs.open(self.path(name), "rb") as f:
                return f.read()

        try:
            return self._call(name, read, missing_ok=True)
        except FileNotFoundError:
            return None

    def read_json(self, name: str) -> Any | None:
        data = self.read_bytes(name)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return None

    def listdir(self, sub: str = "") -> list[str]:
        """Base names directly under the folder (or under ``sub``)."""
        base = self.path(sub) if sub else self.root

        def ls() -> list[str]:
            self.fs.invalidate_cache(base)
            return self.fs.ls(base, detail=False)

        try:
            entries = self._call(sub, ls, missing_ok=True)
        except FileNotFoundError:
            return []
        return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)

    # --- writing -------------------------------------------------------------------------
    def temp_path(self, name: str) -> str:
        """A local path to build ``name`` in before publishing it."""
        if self.local:
            return os.path.join(self.root, f".{name}.tmp-{os.getpid()}")
        if self._tmpdir is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="wdstool-pack-")
        return os.path.join(self._tmpdir.name, f"{name}.tmp-{os.getpid()}")

    def publish(self, tmp: str, name: str, etag: str | None = None) -> str | None:
        """Move a complete local file to its final name, atomically. Remote: upload, then check
        the stored size and (S3) ETag against ``etag`` (computed here when not given); a
        mismatch is retried, then an error. Returns the stored ETag (remote) or None."""
        if self.local:
            os.replace(tmp, os.path.join(self.root, name))
            return None
        size = os.path.getsize(tmp)
        part = part_size_for(size)
        if is_s3(self.url) and (etag is None or part != PART_SIZE):
            etag = file_etag(tmp, part)
        path = self.path(name)

        def upload() -> str | None:
            self.fs.put_file(tmp, path, chunksize=part)
            self.fs.invalidate_cache(path)
            info = self.fs.info(path)
            got_size, got_etag = int(info["size"]), info.get("ETag")
            if got_size != size:
                raise UploadMismatch(f"{got_size} bytes stored, {size} sent")
            if etag and got_etag and _etag_comparable(got_etag) and got_etag != etag:
                raise UploadMismatch(f"stored ETag {got_etag}, expected {etag}")
            return got_etag

        try:
            return self._call(name, upload)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write a small file atomically (temporary name + rename, or one PUT)."""
        if self.local:
            path = os.path.join(self.root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = os.path.join(
                os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}"
            )
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return

        def put() -> None:
            self.fs.pipe_file(self.path(name), data)

        self._call(name, put)

    def sync(self, names: list[str]) -> None:
        """Make published files durable (local only; an object store's PUT already is). Done
        once for all shards before the manifest is written: the kernel has written most of them
        back by then, and a manifest never names data that a power loss could still take."""
        if not self.local:
            return
        for name in names:
            fd = os.open(os.path.join(self.root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, name: str) -> None:
        if self.local:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(self.path(name), recursive=True)
            return

        def rm() -> None:
            paths = self.fs.find(self.path(name), withdirs=False) or [self.path(name)]
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(paths)
            self.fs.invalidate_cache(self.path(name))

        with contextlib.suppress(FileNotFoundError):
            self._call(name, rm, missing_ok=True)

    def remove_stale_temps(self) -> Iterator[str]:
        """Delete temporary files left by an interrupted local run; yield their names."""
        if not self.local or not os.path.isdir(self.root):
            return
        for name in os.listdir(self.root):
            if name.startswith(".") and ".tmp-" in name:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.root, name))
                yield name


class UploadMismatch(ConnectionError):
    """The stored object is not what was sent: retried like a dropped connection."""


def _etag_comparable(etag: str) -> bool:
    """MD5-style ETags only (SSE-KMS and some stores use other schemes)."""
    core = etag.strip('"').split("-", 1)[0]
    return len(core) == 32 and all(c in "0123456789abcdef" for c in core.lower())


def describe_missing(url: str) -> str:
    if is_s3(url):
        bucket, _ = split_s3(url)
        return f"bucket {bucket!r} does not exist (or the path is missing)"
    return "not found"
