"""``make_loader``'s ``source`` argument -> the loader's sources, each resolved and validated.

``source`` is one data set (a path, URL or brace pattern) or a list of :class:`Source` (a
mixture). Each source is resolved in the main process before any worker starts (manifest read,
or header-only scan of shards without one); a source that does not resolve, an empty one, a
bad weight or a ``label`` its samples do not carry (:mod:`loaders.labels`) is a one-line
ConfigError naming it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from loaders.dataset import LoaderSource
from loaders.labels import check_label
from loaders.parquet_source import ParquetIndex, parquet_schema, resolve_parquet
from loaders.schema import FieldsFn, SampleSchema
from loaders.source import DatasetIndex, ShardAccess, Source, resolve_source
from wdstool.base.errors import ConfigError, WdsToolError
from wdstool.format.parquet_files import is_parquet_source, parquet_in, split_source

SourceArg = str | os.PathLike[str] | Source | Sequence[Source]


def loader_sources(
    source: SourceArg,
    *,
    label: str | None,
    fields: Mapping[str, str] | None,
    fields_fn: FieldsFn | None,
    access: ShardAccess,
    skip_damaged: bool = False,
) -> tuple[list[LoaderSource], bool]:
    """The resolved sources, and whether batches say which source each sample came from (they
    do when ``source`` is a list or a :class:`Source`); a source's own ``storage_options``
    replace ``access``'s."""
    storage_options = access.storage_options
    if isinstance(source, str | os.PathLike):
        schema = SampleSchema.build(label, fields, fields_fn)
        url = os.fspath(source)
        index = resolve_any(url, storage_options, access, skip_damaged)
        index, schema = _parquet_columns(index, schema, None, url)
        if not isinstance(index, ParquetIndex):  # its columns were checked
            check_label(index, schema, access)
        return [LoaderSource(url, index, access, schema)], False
    listed = [source] if isinstance(source, Source) else list(source)
    if not listed:
        raise ConfigError("source: an empty list of sources")
    out = []
    for n, src in enumerate(listed):
        if not isinstance(src, Source):
            raise ConfigError(
                f"source[{n}] is a {type(src).__name__}; a mixture is a list of "
                "loaders.Source(url, weight=...)"
            )
        schema = SampleSchema.build(
            src.get("label", label), src.get("fields", fields), src.get("fields_fn", fields_fn)
        )
        options = src.get("storage_options", storage_options)
        src_access = access if options is storage_options else _with_options(access, options)
        try:
            index = resolve_any(src.url, options, src_access, skip_damaged)
            index, schema = _parquet_columns(index, schema, src.image, f"source[{n}] {src.url}")
        except ConfigError:
            raise
        except WdsToolError as exc:
            raise ConfigError(f"source[{n}] {src.url}: {exc.message}") from None
        if index.num_samples <= 0:
            raise ConfigError(f"source[{n}] {src.url}: no samples (weight {src.weight})")
        try:
            if not isinstance(index, ParquetIndex):
                check_label(index, schema, src_access)
        except ConfigError as exc:
            raise ConfigError(f"source[{n}] {exc.message}") from None
        out.append(LoaderSource(src.url, index, src_access, schema, float(src.weight)))
    return out, True


def resolve_any(
    url: str,
    storage_options: dict[str, Any] | None,
    access: ShardAccess | None = None,
    skip_damaged: bool = False,
) -> DatasetIndex:
    """A source's index: Parquet files (a ``.parquet`` file, glob or pattern, a Hub data set, a
    folder holding Parquet files and no shards) as a :class:`ParquetIndex` of row groups,
    anything else as :func:`loaders.source.resolve_source` resolves it."""
    if is_parquet_source(url):
        return resolve_parquet(url, storage_options, access)
    try:
        return resolve_source(url, storage_options, access=access, skip_damaged=skip_damaged)
    except WdsToolError:
        if parquet_in(split_source(url)[0], storage_options):
            return resolve_parquet(url, storage_options, access)
        raise


def _parquet_columns(
    index: DatasetIndex, schema: SampleSchema, image: str | None, where: str
) -> tuple[DatasetIndex, SampleSchema]:
    if isinstance(index, ParquetIndex):
        return parquet_schema(index, schema, image, where)
    if image is not None:
        raise ConfigError(
            f"{where}: image={image!r} names a Parquet column; this is no Parquet source"
        )
    return index, schema


def _with_options(access: ShardAccess, options: dict[str, Any] | None) -> ShardAccess:
    from dataclasses import replace

    return replace(access, storage_options=options)
