"""``wdstool index SOURCE... --out PATH``: an index of shards you cannot write next to.

Someone else's WebDataset on a web server, the Hub or a read-only bucket has no ``index.json``
of ours; without an index every training job counts its samples by scanning their headers
before the first step. This writes one, once, where you choose (a local path or a URL), as a
wids shard index (``shardlist`` of ``{url, nsamples, filesize}``: wids, upstream webdataset and
Hugging Face ``datasets`` read it) with each sample's byte offset added (``offsets``), so a
loader's workers that split a shard start reading at their first sample. Shard URLs are
written absolute; ``make_loader(PATH)`` takes the index as its source.

A SOURCE is a brace pattern or one shard's URL, a folder or prefix of ``.tar`` files, or an
index of shards (ours, wids', timm's ``_info.json#SPLIT``). Only tar headers are read (member
data is skipped: seeked past locally, read through or skipped by a ranged request remotely).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shard_writer.dest import Destination
from wdstool.base.errors import InputError, ShardError, StorageError
from wdstool.base.remote import open_shard
from wdstool.format.indexes import index_or_shards
from wdstool.format.manifest import Manifest, ManifestNotFound, ShardEntry, resolve_shard_url
from wdstool.format.shardlist import expand, is_pattern
from wdstool.format.tar_index import ShardScan, scan_shard


def shards_of(source: str, storage_options: dict[str, Any] | None) -> list[str]:
    """The shard URLs a SOURCE names; InputError where it names none."""
    if is_pattern(source):
        return expand(source)  # an index beside them is not needed: they are scanned
    try:
        manifest, base, urls = index_or_shards(source, storage_options)
    except ManifestNotFound:
        raise InputError(f"{source}: no index and no .tar shards there") from None
    except (ShardError, StorageError) as exc:
        raise InputError(exc.message) from None
    return urls if manifest is None else [resolve_shard_url(base, s.url) for s in manifest.shards]


def dataset_of(
    source: str, storage_options: dict[str, Any] | None = None, *, count: bool = True
) -> tuple[Manifest, str]:
    """What ``inspect`` and ``verify`` read of any SOURCE: its index (ours, wids', timm's; for
    shards named by a pattern, one beside them that lists them) and the URL its names are
    relative to; without one, its shards with their counts from a header scan (``count``), or
    unknown (-1: ``verify`` counts them as it reads them)."""
    manifest, base, urls = index_or_shards(source, storage_options)
    if manifest is not None:
        return manifest, base
    if not count:
        return Manifest(shards=tuple(ShardEntry(u, -1, -1, "") for u in urls)), ""
    scans = _scan(urls, storage_options, 8, None)
    return Manifest(shards=tuple(ShardEntry(s.url, s.nsamples, s.filesize, "") for s in scans)), ""


def _scan(
    urls: list[str],
    storage_options: dict[str, Any] | None,
    workers: int,
    progress: Callable[[int, int], object] | None,
) -> list[ShardScan]:
    done = itertools.count(1)

    def one(url: str) -> ShardScan:
        with open_shard(url, storage_options, local_buffer=0) as f:
            scan = scan_shard(f, url)
        if progress is not None:
            progress(next(done), len(urls))
        return scan

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(urls)))) as pool:
        return list(pool.map(one, urls))


def _absolute(url: str) -> str:
    return url if "://" in url or url.startswith("/") else os.path.abspath(url)


def write_foreign_index(
    sources: list[str],
    out: str,
    *,
    storage_options: dict[str, Any] | None = None,
    workers: int = 8,
    progress: Callable[[int, int], object] | None = None,
) -> dict[str, Any]:
    """Scan the shards of ``sources`` and write their index to ``out`` (a ``.json`` path or
    URL), atomically; returns a summary. A shard that is cut short or corrupt is a ShardError
    naming it (nothing is written)."""
    if not out.endswith(".json"):
        raise InputError(f"{out}: name the index file to write, e.g. {out.rstrip('/')}/index.json")
    urls = [_absolute(u) for src in sources for u in shards_of(src, storage_options)]
    if len(set(urls)) != len(urls):
        raise InputError("the sources name a shard twice")
    scans = _scan(urls, storage_options, workers, progress)
    entries = [ShardEntry(s.url, s.nsamples, s.filesize, "", s.offsets) for s in scans]
    manifest = Manifest(shards=tuple(entries), name=os.path.basename(out)[: -len(".json")])
    folder, _, name = out.rstrip("/").rpartition("/")
    Destination(folder or ".", storage_options).write_bytes(name, manifest.dumps())
    return {
        "index": out,
        "num_shards": len(entries),
        "num_samples": manifest.num_samples,
        "total_bytes": sum(s.filesize for s in scans),
    }


__all__ = ["dataset_of", "shards_of", "write_foreign_index"]
