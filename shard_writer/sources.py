"""SRC on an object store (``s3://bucket/prefix``, or any fsspec URL): listing and reading.

A cluster pack reads its images from where every node can reach them. The tree is listed once
by the driver with a recursive listing (on S3 one ListObjectsV2 page per 1,000 keys, no request
per "folder"); samples are read by the tasks with ranged GETs (the probe reads the header and
the tail of each image, the shard writer the whole object). Every remote call is retried with
:class:`wdstool.base.retry.RetryPolicy`; what is left is a one-line error naming the URL.

Images a listing names by URL, and a listing file on an object store, are read here too
(:func:`read_range`, :func:`object_size`: one object by its full URL, from
:mod:`wdstool.base.objects`).

A local SRC (a path or ``file://``) never comes here: :mod:`shard_writer.scan` walks it with
``os.walk`` exactly as torchvision does, and the listing below reproduces that order, so the
same tree packed from S3 or from disk gives byte-identical shards.
"""

from __future__ import annotations

import posixpath
from typing import Any

from wdstool.base.credentials import redact
from wdstool.base.errors import InputError, StorageError
from wdstool.base.objects import Missing, object_size, read_range, url_fs
from wdstool.base.retry import DEFAULT_RETRY, describe

__all__ = ["Missing", "imagefolder_order", "list_tree", "object_size", "read_range", "url_of"]


def url_of(root: str, relpath: str) -> str:
    return f"{root.rstrip('/')}/{relpath}"


def list_tree(root: str, storage_options: dict[str, Any] | None = None) -> list[tuple[str, int]]:
    """Every object under ``root`` as (path relative to root, size), sorted by path."""
    fs, path = url_fs(root, storage_options)

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
