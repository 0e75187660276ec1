"""SRC on an object store (``s3://bucket/prefix``, or any fsspec URL): listing and reading.

A cluster pack reads its images from where every node can reach them. The tree is listed once
by the driver with a recursive listing (on S3 one ListObjectsV2 page per 1,000 keys, no request
per "folder"); samples are read by the tasks with ranged GETs (the probe reads the header and
the tail of each image, the shard writer the whole object). Every remote call is retried with
:class:`wdstool.base.retry.RetryPolicy`; what is left is a one-line error naming the URL.

Images a listing names by URL, and a listing file on an object store, are read here too
(:func:`read_range`, :func:`object_size`: one object by its full URL).

A local SRC (a path or ``file://``) never comes here: :mod:`shard_writer.scan` walks it with
``os.walk`` exactly as torchvision does, and the listing below reproduces that order, so the
same tree packed from S3 or from disk gives byte-identical shards.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any, TypeVar

from wdstool.base.credentials import redact
from wdstool.base.errors import InputError, StorageError
from wdstool.base.retry import DEFAULT_RETRY, describe, error_code
from wdstool.base.s3 import cached_s3_client, filesystem
from wdstool.base.urls import is_s3, split_s3

T = TypeVar("T")


class Missing(Exception):
    """The object is gone (deleted between the listing and the read)."""


def url_of(root: str, relpath: str) -> str:
    return f"{root.rstrip('/')}/{relpath}"


def _fs(root: str, storage_options: dict[str, Any] | None):
    try:
        fs, path = filesystem(root, storage_options)
    except (ImportError, ValueError, TypeError) as exc:
        raise InputError(
            redact(f"{root}: cannot read this source: {exc}", storage_options)
        ) from None
    return fs, path.rstrip("/")


def list_tree(root: str, storage_options: dict[str, Any] | None = None) -> list[tuple[str, int]]:
    """Every object under ``root`` as (path relative to root, size), sorted by path."""
    fs, path = _fs(root, storage_options)

    def find() -> dict[str, Any]:
        fs.invalidate_cache(path)
        return fs.find(path, detail=True, withdirs=False)

    try:
        found = DEFAULT_RETRY.call(root, find)
    except FileNotFoundError:
        raise InputError(f"{root}: no such bucket or prefix") from None
    except StorageError as exc:
        raise InputError(redact(exc.message, storage_options)) from None
    except Exception as exc:
        raise InputError(redact(f"{root}: cannot list: {describe(exc)}", storage_options)) from None
    if not found:
        raise InputError(f"{root}: no such bucket or prefix (nothing is listed under it)")
    base = path + "/"
    out = []
    for p, info in found.items():
        p = p.lstrip("/") if not path.startswith("/") else p
        if p.startswith(base) and not p.endswith("/"):
            out.append((p[len(base) :], int(info.get("size") or info.get("Size") or 0)))
    return sorted(out)


def imagefolder_order(
    entries: list[tuple[str, int]], extensions: tuple[str, ...]
) -> tuple[list[str], list[tuple[int, str, int]], list[str]]:
    """torchvision's ImageFolder order for a listing: (classes, [(class_idx, relpath, size)],
    classes without images). Classes are the top-level folders; within a class, folders are
    visited in ``sorted(os.walk(...))`` order (by path) and files sorted by name."""
    by_dir: dict[str, dict[str, list[tuple[str, int]]]] = {}
    for rel, size in entries:
        if "/" not in rel:
            continue  # a file directly under SRC belongs to no class
        cls = rel.split("/", 1)[0]
        folder, name = posixpath.split(rel)
        by_dir.setdefault(cls, {}).setdefault(folder, []).append((name, size))
    classes = sorted(by_dir)
    files: list[tuple[int, str, int]] = []
    empty: list[str] = []
    for idx, cls in enumerate(classes):
        found = 0
        for folder in sorted(by_dir[cls]):
            for name, size in sorted(by_dir[cls][folder]):
                if name.lower().endswith(extensions):
                    files.append((idx, f"{folder}/{name}", size))
                    found += 1
        if not found:
            empty.append(cls)
    return classes, files, empty


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
    else:
        fs, path = _fs(url, storage_options)

        def get() -> bytes:
            try:
                return fs.cat_file(path, start=start, end=end)
            except FileNotFoundError:
                raise Missing(url) from None

    return _retried(url, get, storage_options)


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
    else:
        fs, path = _fs(url, storage_options)

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
