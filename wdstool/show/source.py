"""What ``wdstool show`` knows about a data set before reading a sample: its shards and their
sizes, classes and skipped inputs, from the manifest alone.

SRC is anything ``make_loader`` reads: a manifest (``index.json``, or a folder/prefix holding
one), a folder/prefix of ``.tar`` shards without one, or a brace pattern of shard URLs. Unlike
the loader, a source without a manifest is not scanned for its sample counts (that reads every
shard): the shards' byte sizes come from the listing (or a HEAD each for a brace pattern), and
samples are drawn by bytes.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from wdstool.base.credentials import redact
from wdstool.base.errors import ConfigError, ShardError, StorageError
from wdstool.base.objects import Missing, object_size, url_fs
from wdstool.base.retry import DEFAULT_RETRY, describe
from wdstool.base.s3 import read_object
from wdstool.base.urls import is_remote, local_path
from wdstool.format.manifest import (
    ManifestNotFound,
    base_url_of,
    manifest_url_for,
    parse_manifest,
    resolve_shard_url,
)
from wdstool.format.shardlist import expand, is_pattern, tars_in


@dataclass(frozen=True, kw_only=True)
class ShardInfo:
    url: str
    filesize: int
    nsamples: int | None  # None: no manifest says


@dataclass(frozen=True, kw_only=True)
class ParquetFacts:
    """What a Parquet source's footers say besides its files (:mod:`wdstool.show.parquet_draw`):
    its row groups, columns (each with its type), the image and label columns, and the
    requests that read the footers."""

    row_groups: int
    columns: str
    image: str
    label: str | None
    footer_requests: int


@dataclass(frozen=True, kw_only=True)
class DataSet:
    """A data set's shards and what its manifest says; ``manifest_bytes`` were read for it.
    Parquet files are its shards (``nsamples``: their rows), their footers its manifest
    (``parquet``)."""

    source: str
    shards: tuple[ShardInfo, ...]
    classes: tuple[str, ...] = ()
    skipped: tuple[dict[str, Any], ...] = ()
    name: str = ""
    manifest_url: str | None = None
    manifest_bytes: int = 0
    parquet: ParquetFacts | None = None

    @property
    def num_samples(self) -> int | None:
        counts = [s.nsamples for s in self.shards]
        return None if None in counts else sum(counts)  # type: ignore[arg-type]

    @property
    def total_bytes(self) -> int:
        return sum(s.filesize for s in self.shards)

    @property
    def index_requests(self) -> int:
        """Requests that read what it says about itself (its manifest, or its footers)."""
        if self.parquet is not None:
            return self.parquet.footer_requests
        return 1 if self.manifest_url else 0


def open_dataset(source: str, storage_options: dict[str, Any] | None = None) -> DataSet:
    """Read the manifest of ``source`` (or list its shards); ShardError naming it otherwise."""
    source = os.fspath(source)
    if not source:
        raise ConfigError("empty data set source")
    if is_pattern(source):
        urls = expand(source)
        return _without_manifest(source, urls, _sizes(urls, storage_options))
    url = manifest_url_for(source)
    try:
        data = read_object(url, storage_options)
    except FileNotFoundError:
        listed = _tars_in(source, storage_options)
        if not listed:
            raise ManifestNotFound(
                f"{url}: no manifest found, and no .tar shards next to it (pass a folder or "
                "prefix holding index.json or shards, or a brace pattern of shard URLs)"
            ) from None
        return _without_manifest(source, [u for u, _ in listed], [n for _, n in listed])
    manifest = parse_manifest(data, url)
    if not manifest.shards:
        raise ShardError(f"{url}: the manifest lists no shards")
    base = base_url_of(url)
    urls = [resolve_shard_url(base, s.url) for s in manifest.shards]
    unknown = [u for u, s in zip(urls, manifest.shards, strict=True) if s.filesize < 0]
    measured = dict(zip(unknown, _sizes(unknown, storage_options), strict=True))
    shards = tuple(
        ShardInfo(url=u, filesize=measured.get(u, s.filesize), nsamples=s.nsamples)
        for u, s in zip(urls, manifest.shards, strict=True)
    )
    return DataSet(
        source=source,
        shards=shards,
        classes=manifest.classes,
        skipped=manifest.skipped,
        name=manifest.name,
        manifest_url=url,
        manifest_bytes=len(data),
    )


def _without_manifest(source: str, urls: list[str], sizes: list[int]) -> DataSet:
    shards = tuple(
        ShardInfo(url=u, filesize=n, nsamples=None) for u, n in zip(urls, sizes, strict=True)
    )
    return DataSet(source=source, shards=shards)


def _sizes(urls: list[str], storage_options: dict[str, Any] | None) -> list[int]:
    def size(url: str) -> int:
        try:
            if not is_remote(url):
                return os.path.getsize(local_path(url))
            return object_size(url, storage_options)
        except (FileNotFoundError, Missing):
            raise ShardError(f"{url}: shard not found") from None
        except OSError as exc:
            raise StorageError(f"{url}: cannot read: {exc.strerror or exc}") from None

    if not urls:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(urls))) as pool:
        return list(pool.map(size, urls))


def _tars_in(folder: str, storage_options: dict[str, Any] | None) -> list[tuple[str, int]]:
    """(URL, size) of the ``.tar`` files directly in a folder or prefix, sorted by name; []
    when there are none or it cannot be listed (the caller's error then says enough)."""
    if folder.endswith(".json") or not is_remote(folder):
        return [(url, os.path.getsize(url)) for url in tars_in(folder, storage_options)]
    fs, path = url_fs(folder, storage_options)  # listed with sizes and retries, errors named
    try:
        found = DEFAULT_RETRY.call(folder, lambda: fs.ls(path, detail=True))
    except FileNotFoundError:
        return []
    except StorageError:
        raise
    except Exception as exc:
        raise StorageError(
            redact(f"{folder}: cannot list: {describe(exc)}", storage_options)
        ) from None
    tars = [
        (fs.unstrip_protocol(i["name"]), int(i.get("size") or i.get("Size") or 0))
        for i in found
        if i.get("type") != "directory" and str(i["name"]).endswith(".tar")
    ]
    return sorted(tars)
