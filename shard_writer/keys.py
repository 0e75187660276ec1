"""Key lists for ``keys`` / ``exclude_keys``: a text file (or object) with one key a line."""

from __future__ import annotations

import hashlib
from typing import Any

from shard_writer import sources
from wdstool.base.errors import InputError, StorageError
from wdstool.base.urls import is_remote, local_path


def read_keys(
    url: str, setting: str, storage_options: dict[str, Any] | None = None
) -> tuple[frozenset[str], str]:
    """(the keys, sha256 of the sorted list) of a key file: UTF-8, one key a line, surrounding
    whitespace and empty lines ignored. A missing, unreadable or empty file is an InputError
    naming ``setting`` (the option that gave the file: ``keys``, ``exclude_keys``)."""
    try:
        if is_remote(url):
            data = sources.read_range(url, storage_options)
        else:
            with open(local_path(url), "rb") as f:
                data = f.read()
    except (FileNotFoundError, sources.Missing):
        raise InputError(f"{setting}={url}: no such file") from None
    except (OSError, StorageError) as exc:
        why = exc.message if isinstance(exc, StorageError) else exc.strerror or exc
        raise InputError(f"{setting}={url}: cannot read: {why}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{setting}={url}: not UTF-8 text (byte {exc.start})") from None
    keys = frozenset(line.strip() for line in text.splitlines() if line.strip())
    if not keys:
        raise InputError(f"{setting}={url}: no keys (expected one key a line)")
    digest = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()
    return keys, digest
