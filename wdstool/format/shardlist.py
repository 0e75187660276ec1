"""Which shards a data set source names: a brace pattern, a folder or prefix of ``.tar`` files,
or a manifest (``index.json``). Both sides resolve sources here: the loaders (then count or read
the samples) and ``reshard`` (then copies them)."""

from __future__ import annotations

import os
from typing import Any

import braceexpand

from wdstool.base.s3 import filesystem
from wdstool.base.urls import is_remote, local_path


def is_pattern(source: str) -> bool:
    """A brace pattern (``data-{000..009}.tar``) or one shard's URL, not a folder or manifest."""
    return "{" in source or source.endswith(".tar")


def expand(source: str) -> list[str]:
    """The shard URLs of a pattern, sorted (one URL stays itself)."""
    return sorted(braceexpand.braceexpand(source)) if "{" in source else [source]


def tars_in(folder: str, storage_options: dict[str, Any] | None) -> list[str]:
    """The ``.tar`` files directly in a folder or prefix without a manifest (shards written by
    other tools), sorted by name; [] when there are none or it cannot be listed."""
    if folder.endswith(".json"):
        return []
    if not is_remote(folder):
        path = local_path(folder)
        if not os.path.isdir(path):
            return []
        names = sorted(n for n in os.listdir(path) if n.endswith(".tar"))
        return [os.path.join(path, n) for n in names]
    try:
        fs, path = filesystem(folder, storage_options)
        fs.invalidate_cache(path.rstrip("/"))
        found = fs.glob(path.rstrip("/") + "/*.tar")
    except Exception:  # unreachable or unlistable: the caller's error says enough
        return []
    return sorted(fs.unstrip_protocol(p) for p in found)
