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
from wdstool.format.parquet_files import is_parquet_source
from wdstool.format.row_groups import parquet_or

SourceArg = str | os.PathLike[str] | Source | Sequence[Source]


def loader_sources(
    source: SourceArg,
    *,
    label: str | None,
    fields: Mapping[str, str] | None,
    fields_fn: FieldsFn | None,
    access: ShardAccess,
    skip_damaged: bool = False,
    one_image: bool = True,
) -> tuple[list[LoaderSource], bool]:
    """The resolved sources, and whether batches say which source each sample came from (they
    do when ``source`` is a list or a :class:`Source`); a source's own ``storage_options``
    replace ``access``'s."""
    storage_options = access.storage_options
    if isinstance(source, str | os.PathLike):
        url = os.fspath(source)
        index, schema = _resolved(
            url, storage_options, access, skip_damaged, one_image, label, fields, fields_fn
        )
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
        options = src.get("storage_options", storage_options)
        src_access = access if options is storage_options else _with_options(access, options)
        args = (src.get("label", label), src.get("fields", fields), src.get("fields_fn", fields_fn))
        try:
            index, schema = _resolved(
                src.url, options, src_access, skip_damaged, one_image, *args, image=src.image
            )
        except ConfigError as exc:
            raise ConfigError(f"source[{n}] {exc.message}") from None
        except WdsToolError as exc:
            raise ConfigError(f"source[{n}] {src.url}: {exc.message}") from None
        if index.num_samples <= 0:
            raise ConfigError(f"source[{n}] {src.url}: no samples (weight {src.weight})")
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
    return parquet_or(
        url,
        storage_options,
        tar=lambda: resolve_source(url, storage_options, access=access, skip_damaged=skip_damaged),
        parquet=lambda: resolve_parquet(url, storage_options, access),
    )


def _resolved(
    url: str,
    storage_options: dict[str, Any] | None,
    access: ShardAccess,
    skip_damaged: bool,
    one_image: bool,
    label: str | None,
    fields: Mapping[str, str] | None,
    fields_fn: FieldsFn | None,
    image: str | None = None,
) -> tuple[DatasetIndex, SampleSchema]:
    """A source's index and schema; errors name ``url``. For tar shards make_loader's arguments
    are checked before any read and the label against the source; for Parquet, the arguments
    on its columns (``one_image`` false: a kind that needs more than one image a row)."""
    schema = None
    if not is_parquet_source(url):  # errors in the arguments before any I/O
        schema = SampleSchema.build(label, fields, fields_fn)
    index = resolve_any(url, storage_options, access, skip_damaged)
    if isinstance(index, ParquetIndex):
        if not one_image:
            raise ConfigError(
                f"{url}: a Parquet source holds one image a row: read it with the image kinds "
                "(clips and interleaved samples need their members packed: `wdstool pack`)"
            )
        return parquet_schema(index, label, fields, fields_fn, image, url)
    if image is not None:
        raise ConfigError(
            f"{url}: image={image!r} names a Parquet column; this is no Parquet source"
        )
    assert schema is not None
    check_label(index, schema, access)
    return index, schema


def _with_options(access: ShardAccess, options: dict[str, Any] | None) -> ShardAccess:
    from dataclasses import replace

    return replace(access, storage_options=options)
