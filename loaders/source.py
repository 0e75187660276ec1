"""Dataset sources: a manifest, a folder/prefix holding one, or a brace pattern of shard URLs.

Everything the loader needs before it reads data is resolved here once, in the main process:
the shard URLs, their sample counts and an identity of the dataset. Shards are opened through
fsspec (local paths, file://, s3://, memory://, ...).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

import braceexpand
import fsspec

from loaders.tario import count_samples
from shard_writer.manifest import load_manifest, resolve_shard_url
from wdstool.errors import ConfigError, ShardError, StorageError

log = logging.getLogger(__name__)
READ_BUFFER = 1 << 20


@dataclass(frozen=True, kw_only=True)
class DatasetIndex:
    """Shard URLs and counts, in manifest order."""

    urls: tuple[str, ...]
    sizes: tuple[int, ...]
    classes: tuple[str, ...] = ()
    identity: str = ""
    from_manifest: bool = True

    @property
    def num_samples(self) -> int:
        return sum(self.sizes)


def _is_pattern(source: str) -> bool:
    return "{" in source or source.endswith(".tar")


def resolve_source(
    source: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> DatasetIndex:
    """Resolve ``source`` to a DatasetIndex (reads the manifest, or scans shard headers)."""
    source = os.fspath(source)
    if not source:
        raise ConfigError("empty dataset source")
    if _is_pattern(source):
        return _scan_shards(
            sorted(braceexpand.braceexpand(source)) if "{" in source else [source], storage_options
        )
    manifest, base = load_manifest(source, storage_options)
    if not manifest.shards:
        raise ShardError(f"{source}: the manifest lists no shards")
    identity = manifest.fingerprint or hashlib.sha256(manifest.dumps()).hexdigest()
    return DatasetIndex(
        urls=tuple(resolve_shard_url(base, s.url) for s in manifest.shards),
        sizes=tuple(s.nsamples for s in manifest.shards),
        classes=manifest.classes,
        identity=identity,
    )


def _scan_shards(urls: list[str], storage_options: dict[str, Any] | None) -> DatasetIndex:
    """No manifest: learn each shard's sample count from a header-only scan."""
    started = time.perf_counter()

    def count(url: str) -> int:
        with open_shard(url, storage_options) as f:
            return count_samples(f, url)

    with ThreadPoolExecutor(max_workers=min(8, len(urls))) as pool:
        sizes = list(pool.map(count, urls))
    log.warning(
        "no manifest: counted %d samples in %d shards by a header-only scan in %.2f s "
        "(write an index.json with `wdstool pack` to skip this)",
        sum(sizes),
        len(urls),
        time.perf_counter() - started,
    )
    h = hashlib.sha256()
    for url, n in zip(urls, sizes, strict=True):
        h.update(f"{url}\0{n}\0".encode())
    return DatasetIndex(
        urls=tuple(urls), sizes=tuple(sizes), identity=h.hexdigest(), from_manifest=False
    )


def open_shard(url: str, storage_options: dict[str, Any] | None = None) -> BinaryIO:
    """Open a shard for sequential reading; errors name the URL."""
    try:
        if "://" not in url or url.startswith("file://"):
            path = url[len("file://") :] if url.startswith("file://") else url
            return open(path, "rb", buffering=READ_BUFFER)
        return fsspec.open(url, "rb", block_size=8 << 20, **(storage_options or {})).open()
    except FileNotFoundError:
        raise ShardError(f"{url}: shard not found") from None
    except PermissionError as exc:
        raise StorageError(f"{url}: access denied: {exc}") from None
    except OSError as exc:
        raise StorageError(f"{url}: cannot open shard: {exc}") from None
