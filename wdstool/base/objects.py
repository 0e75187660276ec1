"""One object on a store, by its full URL: a byte range of it, and its size.

What pack's remote sources (images named by URL, a listing on S3) and ``wdstool show``
(single samples out of remote shards) read: ranged GETs on S3 (``Range: bytes=a-b``, nothing
past ``b`` is sent), ``cat_file`` with ``start``/``end`` on other fsspec URLs, each retried with
:class:`wdstool.base.retry.RetryPolicy`; what is left is a one-line error naming the URL.
:class:`SpanReader` reads spans of shards either way: remote ones by ranged reads, local ones
by positioned reads on a file kept open (reshard's copy, ``wdstool show``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from wdstool.base.credentials import redact
from wdstool.base.errors import InputError, ShardError, StorageError
from wdstool.base.retry import DEFAULT_RETRY, describe, error_code
from wdstool.base.s3 import cached_s3_client, filesystem
from wdstool.base.urls import is_remote, is_s3, local_path, split_s3
from wdstool.base.web import is_web, read_web, web_size

T = TypeVar("T")


class Missing(Exception):
    """The object is gone (deleted between a listing and the read), or never was."""


def url_fs(root: str, storage_options: dict[str, Any] | None):
    """fsspec's (filesystem, path without a trailing slash) for ``root``; InputError naming it
    when the URL or the options are unusable."""
    try:
        fs, path = filesystem(root, storage_options)
    except (ImportError, ValueError, TypeError) as exc:
        raise InputError(
            redact(f"{root}: cannot read this source: {exc}", storage_options)
        ) from None
    return fs, path.rstrip("/")


def read_range(
    url: str,
    storage_options: dict[str, Any] | None = None,
    start: int | None = None,
    end: int | None = None,
) -> bytes:
    """Bytes ``[start, end)`` of one remote object (the whole object by default).
    Raises Missing when it does not exist, StorageError when retries run out."""
    if is_s3(url):
        bucket, key = split_s3(url)

        def get() -> bytes:
            kw: dict[str, Any] = {}
            if start is not None or end is not None:
                kw["Range"] = f"bytes={start or 0}-{'' if end is None else end - 1}"
            try:
                resp = cached_s3_client(storage_options).get_object(Bucket=bucket, Key=key, **kw)
            except Exception as exc:
                if error_code(exc)[0] in ("NoSuchKey", "404", "NotFound"):
                    raise Missing(url) from None
                raise
            return resp["Body"].read()
    elif is_web(url):
        try:
            return read_web(url, storage_options, start, end)
        except ShardError:  # 404: nothing under that name
            raise Missing(url) from None
    else:
        fs, path = url_fs(url, storage_options)

        def get() -> bytes:
            try:
                return fs.cat_file(path, start=start, end=end)
            except FileNotFoundError:
                raise Missing(url) from None

    return _retried(url, get, storage_options)


class SpanReader:
    """Byte spans ``[start, end)`` of files by URL: a ranged read of a remote object
    (:func:`read_range`), a positioned read of a local file, each file opened once until
    :meth:`close`. A span past a file's end comes back short: the caller says what that means.
    Raises what the store raises: Missing, StorageError (remote), OSError (local; a missing
    file is FileNotFoundError). Not thread-safe: one per thread."""

    def __init__(self, storage_options: dict[str, Any] | None = None) -> None:
        self._options = storage_options
        self._fds: dict[str, int] = {}

    def read(self, url: str, start: int, end: int) -> bytes:
        if is_remote(url):
            return read_range(url, self._options, start, end)
        fd = self._fds.get(url)
        if fd is None:
            fd = self._fds[url] = os.open(local_path(url), os.O_RDONLY)
        parts, pos = [], start
        while pos < end:
            chunk = os.pread(fd, end - pos, pos)
            if not chunk:
                break
            parts.append(chunk)
            pos += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> SpanReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def object_size(url: str, storage_options: dict[str, Any] | None = None) -> int:
    """The size of one remote object (a HEAD request on S3). Raises Missing when there is no
    object under that name (a prefix is not an object), StorageError when retries run out."""
    if is_s3(url):
        bucket, key = split_s3(url)

        def head() -> int:
            try:
                resp = cached_s3_client(storage_options).head_object(Bucket=bucket, Key=key)
            except Exception as exc:
                if error_code(exc)[0] in ("NoSuchKey", "404", "NotFound"):
                    raise Missing(url) from None
                raise
            return int(resp["ContentLength"])
    elif is_web(url):
        try:
            return web_size(url, storage_options)
        except ShardError:
            raise Missing(url) from None
    else:
        fs, path = url_fs(url, storage_options)

        def head() -> int:
            try:
                info = fs.info(path)
            except FileNotFoundError:
                raise Missing(url) from None
            if info.get("type") == "directory":
                raise Missing(url)
            return int(info.get("size") or info.get("Size") or 0)

    return _retried(url, head, storage_options)


def _retried(url: str, fn: Callable[[], T], storage_options: dict[str, Any] | None) -> T:
    try:
        return DEFAULT_RETRY.call(url, fn)
    except (Missing, StorageError):
        raise
    except Exception as exc:
        raise StorageError(redact(f"{url}: {describe(exc)}", storage_options)) from None
