"""Dataset sources: an index, a folder/prefix holding one, or a brace pattern of shard URLs.

Everything the loader needs before it reads data is resolved here once, in the main process:
the shard URLs, their sample counts (and, where known, each sample's offset) and an identity of
the dataset. Counts come from an index (``wdstool.format.indexes``: ours, a wids index, timm's
``_info.json``; for a brace pattern, one in the shards' folder that lists them), else from a
header scan done once per data set (``loaders.scan``). Shards are opened by
:class:`ShardAccess`: local paths directly, ``s3://``, ``http(s)://`` and ``hf://`` as one
streaming GET per shard with Range-resume retries (``wdstool.base.remote``), other fsspec URLs
through the same retrying reader, optionally through a local cache (``loaders.cache``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from loaders.cache import ShardCache
from loaders.scan import shared_scan
from loaders.source_table import (
    TableColumn,
    TableUrls,
    keep_table,
    kept_table,
    parsing_lock,
    streamed_table,
    written_table,
)
from wdstool.base.errors import ConfigError, ShardError
from wdstool.base.host import job_on_host
from wdstool.base.params import parse_size
from wdstool.base.remote import open_shard
from wdstool.base.retry import DEFAULT_RETRY, RetryPolicy
from wdstool.base.urls import is_remote
from wdstool.format.indexes import index_or_shards, index_version
from wdstool.format.manifest import Manifest, base_url_of, resolve_shard_url
from wdstool.format.sample_offsets import OffsetsFile
from wdstool.format.shard_table import ShardTable

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class DatasetIndex:
    """Shard URLs and counts, in manifest order."""

    urls: tuple[str, ...]
    sizes: tuple[int, ...]
    classes: tuple[str, ...] = ()
    identity: str = ""
    from_manifest: bool = True
    filesizes: tuple[int | None, ...] = ()  # from the manifest; () when unknown
    sha256s: tuple[str | None, ...] = ()
    # per shard, where each sample starts (an index that says, or the scan); () when unknown
    offsets: tuple[tuple[int, ...] | None, ...] = ()
    # every sample's offset in a file beside the manifest (its URL as ``name``), read a shard
    # at a time where a worker needs one (``loaders.split_reads``); None where there is none
    offsets_file: OffsetsFile | None = None
    # earlier versions of an appended data set: (identity, shards, samples) each; its shards
    # are the first ``shards`` of ``urls`` (pack/reshard --append never touch old shards)
    versions: tuple[tuple[str, int, int], ...] = ()

    def size_of(self, shard: int) -> int | None:
        size = self.filesizes[shard] if self.filesizes else None
        return size if size is not None and size >= 0 else None  # -1: the index does not say

    def offset_of(self, shard: int, sample: int) -> int | None:
        """Where sample ``sample`` of shard ``shard`` starts, where that is known."""
        offsets = self.offsets[shard] if self.offsets else None
        return offsets[sample] if offsets is not None and sample < len(offsets) else None

    def sha256_of(self, shard: int) -> str | None:
        return (self.sha256s[shard] or None) if self.sha256s else None

    @property
    def num_samples(self) -> int:
        return sum(self.sizes)

    def version_sizes(self, identity: str) -> tuple[int, ...] | None:
        """The shard sizes of the data set as it was when its identity was ``identity`` (the
        current one or an earlier version's); None when it never was."""
        if identity == self.identity:
            return self.sizes
        for vid, shards, samples in self.versions:
            if vid == identity:
                sizes = self.sizes[:shards]
                if sum(sizes) != samples:
                    raise ShardError(
                        f"the manifest's version with identity {vid[:12]}... counts {samples} "
                        f"samples in its first {shards} shards, the shard list {sum(sizes)}"
                    )
                return sizes
        return None


def identity_key(identity: str) -> int:
    """A stable integer from a data set's identity: seeds the source's walk in the plan."""
    return int(hashlib.sha256(identity.encode()).hexdigest()[:15], 16)


def resolve_source(
    source: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    *,
    access: ShardAccess | None = None,
    skip_damaged: bool = False,
) -> DatasetIndex:
    """Resolve ``source`` to a DatasetIndex: its index, else a header scan of its shards (once
    per data set: ``loaders.scan``; ``access`` opens them, with its retries and cache;
    ``skip_damaged``: a shard cut short counts the samples before the cut)."""
    source = os.fspath(source)
    if not source:
        raise ConfigError("empty dataset source")
    cache_dir = access.cache_dir if access is not None else None
    found = index_version(source, storage_options)  # a stat or a HEAD: nothing read
    if found is None:
        return _resolved(source, storage_options, access, skip_damaged, None)
    with parsing_lock(found, cache_dir):  # a large manifest: one rank of the host parses it
        table = (
            kept_table(found, cache_dir)
            or written_table(found, storage_options, cache_dir)
            or streamed_table(found, storage_options, cache_dir)
        )
        if table is not None:
            return _from_table(table, base_url_of(found[0]))
        return _resolved(source, storage_options, access, skip_damaged, found)


def _resolved(
    source: str,
    storage_options: dict[str, Any] | None,
    access: ShardAccess | None,
    skip_damaged: bool,
    found: tuple[str, str] | None,
) -> DatasetIndex:
    manifest, base, urls = index_or_shards(source, storage_options)
    if manifest is None:
        return _scanned(urls, access or ShardAccess(storage_options=storage_options), skip_damaged)
    if not manifest.shards:
        raise ShardError(f"{source}: the manifest lists no shards")
    index = _from_manifest(manifest, base)
    if found is not None:
        cache_dir = access.cache_dir if access is not None else None
        keep_table(manifest, index.identity, found, storage_options, cache_dir)
    return index


def _from_table(table: ShardTable, base: str) -> DatasetIndex:
    """The index of a kept shard table: URLs made when asked for, no object per shard."""
    return DatasetIndex(
        urls=TableUrls(table, base),  # type: ignore[arg-type]
        sizes=tuple(table.nsamples.tolist()),
        classes=table.classes,
        identity=table.identity,
        filesizes=TableColumn(table.filesize),  # type: ignore[arg-type]
        sha256s=TableColumn(table.sha256, text=True),  # type: ignore[arg-type]
        versions=table.versions,
        offsets_file=_located(table.sample_offsets, base),
    )


def _located(of: OffsetsFile | None, base: str) -> OffsetsFile | None:
    """The offsets file with its URL resolved against the manifest's folder."""
    if of is None:
        return None
    return dataclasses.replace(of, name=resolve_shard_url(base, of.name) if base else of.name)


def _from_manifest(manifest: Manifest, base: str) -> DatasetIndex:
    # pack writes a fingerprint; for other manifests hash what defines the data (re-serialising
    # the whole manifest took 0.75 s of a 1 s make_loader at 100,000 shards)
    identity = (
        manifest.fingerprint
        or hashlib.sha256(
            "\n".join(f"{s.url}\0{s.nsamples}\0{s.sha256}" for s in manifest.shards).encode()
        ).hexdigest()
    )
    urls, sizes, filesizes, sha256s, offsets = zip(*manifest.shards, strict=True)  # at once
    return DatasetIndex(
        urls=tuple(resolve_shard_url(base, u) if base else u for u in urls),
        sizes=sizes,
        classes=manifest.classes,
        identity=identity,
        filesizes=filesizes,
        sha256s=sha256s,
        offsets=offsets if any(o is not None for o in offsets) else (),
        versions=tuple((v.identity, v.shards, v.samples) for v in manifest.versions[:-1]),
        offsets_file=_located(manifest.sample_offsets, base),
    )


def _scanned(urls: list[str], access: ShardAccess, skip_damaged: bool) -> DatasetIndex:
    """No index: counts and sample offsets from a header scan, once per data set."""
    scans = shared_scan(
        urls,
        lambda url: access.open(url),
        skip_damaged=skip_damaged,
        cache_dir=access.cache_dir,
    )
    h = hashlib.sha256()
    for s in scans:
        h.update(f"{s.url}\0{s.nsamples}\0".encode())
    return DatasetIndex(
        urls=tuple(urls),
        sizes=tuple(s.nsamples for s in scans),
        identity=h.hexdigest(),
        from_manifest=False,
        offsets=tuple(s.offsets for s in scans),
    )


@dataclass(frozen=True, kw_only=True)
class ShardAccess:
    """How shards are opened: storage options, retries, an optional local cache. Picklable (it
    travels to DataLoader workers)."""

    storage_options: dict[str, Any] | None = None
    cache_dir: str | os.PathLike[str] | None = None
    cache_limit: int | None = None
    retry: RetryPolicy = field(default=DEFAULT_RETRY)  # None: the default policy
    # the job this loader belongs to (``wdstool.base.host.job_on_host``, in the process that
    # made it): names the host's shared copies of split shards (``loaders.split_reads``)
    job: str = field(default_factory=job_on_host, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.retry is None:
            object.__setattr__(self, "retry", DEFAULT_RETRY)
        if self.cache_limit is not None:
            try:
                limit = parse_size(self.cache_limit)
            except ValueError as exc:
                raise ConfigError(f"cache_limit: {exc}") from None
            if limit <= 0:
                raise ConfigError(f"cache_limit must be positive, got {self.cache_limit!r}")
            object.__setattr__(self, "cache_limit", limit)
        if self.cache_limit is not None and self.cache_dir is None:
            raise ConfigError("cache_limit needs cache_dir")
        if self.cache_dir is not None:
            object.__setattr__(self, "cache_dir", os.fspath(self.cache_dir))

    is_remote = staticmethod(is_remote)

    def open(
        self,
        url: str,
        *,
        size: int | None = None,
        sha256: str | None = None,
        stats: dict[str, int] | None = None,
        limit: int | None = None,
    ) -> BinaryIO:
        """Open a shard for sequential reading from byte 0 (through the cache, when it has
        one and the shard is remote); errors name the URL. ``limit``: a remote shard read
        without the cache is not asked for bytes at or past it (a slice ending inside it)."""

        def reopen(until: int | None = None) -> BinaryIO:
            return open_shard(
                url, self.storage_options, retry=self.retry, size=size, stats=stats, limit=until
            )

        if self.cache_dir is None or not is_remote(url):
            return reopen(limit)  # remote shards: no request yet, readers open their GET lazily
        f = reopen()
        cache = ShardCache(self.cache_dir, self.cache_limit)
        return cache.open(url, f, reopen=reopen, version=sha256, size=size)


class _Inherit:
    def __repr__(self) -> str:
        return "INHERIT"


INHERIT: Any = _Inherit()  # a Source setting left to make_loader's argument of the same name


@dataclass(frozen=True)
class Source:
    """One data set of a mixture: ``make_loader([Source(url, weight=0.7), Source(...)])``.

    ``weight``: its relative share of each epoch (any positive number). ``label``, ``fields``,
    ``fields_fn`` and ``storage_options`` default to ``make_loader``'s arguments of the same
    name; set them here for a source whose samples look different (``label="json:class_id"``)
    or that lives elsewhere (another S3 endpoint). ``image``: the image column of a Parquet
    source, where its type does not say (a plain binary column beside others)."""

    url: str | os.PathLike[str]
    weight: float = 1.0
    label: Any = INHERIT
    fields: Any = INHERIT
    fields_fn: Any = INHERIT
    storage_options: Any = INHERIT
    image: str | None = None  # a Parquet source's image column (found by its type without it)

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", os.fspath(self.url))
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, int | float) or not w > 0 or w != w:
            raise ConfigError(f"source {self.url}: weight must be a number > 0, got {w!r}")
        if w == float("inf"):
            raise ConfigError(f"source {self.url}: weight must be finite, got {w!r}")

    def get(self, name: str, default: Any) -> Any:
        value = getattr(self, name)
        return default if value is INHERIT else value
