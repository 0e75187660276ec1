"""Parquet files as the tools read them (``inspect``, ``verify``, ``show``): every footer, then
row groups' column chunks by range, each read once, with no cache.

The loader reads the same files through :mod:`loaders.parquet_source` (footers kept per host,
chunks through its cache, row groups as the plan's units); the tools need neither the plan nor
torch: :func:`open_parquet` lists the files (:func:`wdstool.format.parquet_files.list_parquet`),
reads their footers (one ranged read a file, 16 at a time) and checks that they share their
columns; :class:`ChunkReader` reads one row group's chunks of the columns asked for and
decodes them with pyarrow, counting what it fetched.

:func:`parquet_or` decides between a tar data set and Parquet files as ``make_loader`` does: a
source that names Parquet by its form is Parquet; any other is read as tar shards or a
manifest, and a folder holding ``.parquet`` files is Parquet where that finds nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from wdstool.base.errors import ShardError, StorageError, WdsToolError
from wdstool.base.objects import Missing, SpanReader
from wdstool.format.indexes import split_fragment
from wdstool.format.parquet import (
    Columns,
    Footer,
    columns_of,
    group_spans,
    read_footer,
    read_group,
    same_columns,
)
from wdstool.format.parquet_files import (
    NoParquet,
    ParquetObject,
    hub_folder,
    is_parquet_source,
    list_parquet,
    parquet_in,
)
from wdstool.format.parquet_rows import key_prefixes
from wdstool.format.shardlist import tars_in

FOOTER_THREADS = 16
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class ParquetSet:
    """A source's Parquet files: their footers (sorted by URL), shared columns and key prefixes,
    and what reading the footers cost (bytes, requests)."""

    source: str
    footers: tuple[Footer, ...]
    columns: Columns
    prefixes: tuple[str, ...]
    footer_bytes: int = 0
    footer_requests: int = 0

    @property
    def num_rows(self) -> int:
        return sum(ft.metadata.num_rows for ft in self.footers)

    @property
    def num_groups(self) -> int:
        return sum(ft.metadata.num_row_groups for ft in self.footers)

    @property
    def total_bytes(self) -> int:
        return sum(ft.size for ft in self.footers)


class _Counted:
    """Bytes and requests, summed over threads."""

    def __init__(self) -> None:
        self.bytes = self.requests = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.bytes += n
            self.requests += 1


def open_parquet(
    source: str,
    storage_options: dict[str, Any] | None = None,
    *,
    objects: Sequence[ParquetObject] | None = None,
    footers_of: Callable[[Sequence[ParquetObject], Callable[[int], object]], list[Footer]]
    | None = None,
) -> ParquetSet:
    """The files ``source`` names (``#SPLIT`` keeps one split; ``objects``: listed already) and
    their footers (``footers_of(objects, on_read)``: read otherwise than by
    :func:`read_footers`, e.g. kept per host); ShardError naming the file whose footer is no
    Parquet footer or whose columns differ from the first file's."""
    if objects is None:
        objects = list_parquet(source, storage_options)
    counted = _Counted()
    if footers_of is None:
        footers = read_footers(objects, storage_options, counted.add)
    else:
        footers = footers_of(objects, counted.add)
    columns = columns_of(footers[0])
    for ft in footers[1:]:
        same_columns(columns, columns_of(ft), ft.url)
    return ParquetSet(
        source=source,
        footers=tuple(footers),
        columns=columns,
        prefixes=tuple(key_prefixes([ft.url for ft in footers])),
        footer_bytes=counted.bytes,
        footer_requests=counted.requests,
    )


def read_footers(
    objects: Sequence[ParquetObject],
    storage_options: dict[str, Any] | None,
    on_read: Callable[[int], object] | None = None,
) -> list[Footer]:
    """Every file's footer, read in parallel threads (``on_read`` sees each read's length)."""

    def one(obj: ParquetObject) -> Footer:
        with SpanReader(storage_options) as spans:

            def read(a: int, b: int) -> bytes:
                data = fetch(spans, obj.url, a, b)
                if on_read is not None:
                    on_read(len(data))
                return data

            return read_footer(obj.url, obj.size, read, obj.version)

    if len(objects) == 1:
        return [one(objects[0])]
    with ThreadPoolExecutor(max(1, min(FOOTER_THREADS, len(objects)))) as pool:
        return list(pool.map(one, objects))


def fetch(spans: SpanReader, url: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file; a one-line error naming it where it is gone, cannot
    be read, or ends sooner than its listing said."""
    try:
        data = spans.read(url, start, end)
    except (Missing, FileNotFoundError):
        raise ShardError(f"{url}: not found") from None
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"{url}: cannot read: {exc.strerror or exc}") from None
    if len(data) != end - start:
        raise ShardError(f"{url}: ends before byte {end}; its listing or footer says more")
    return data


class ChunkReader:
    """Row groups' chunks of some columns, by ranged reads; one per thread (its files stay
    open until :meth:`close`). ``on_read`` sees each read's length."""

    def __init__(
        self,
        storage_options: dict[str, Any] | None = None,
        on_read: Callable[[int], object] | None = None,
    ) -> None:
        self._spans = SpanReader(storage_options)
        self._on_read = on_read

    def table(self, footer: Footer, group: int, leaves: Sequence[str]) -> Any:
        """Row group ``group`` of the column paths ``leaves`` as a pyarrow Table; ShardError
        naming the file and the row group where its bytes are missing or do not decode."""
        pieces = []
        for a, b in group_spans(footer, group, leaves):
            try:
                data = fetch(self._spans, footer.url, a, b)
            except ShardError as exc:
                raise ShardError(f"{exc.message} (row group {group})") from None
            if self._on_read is not None:
                self._on_read(len(data))
            pieces.append((a, data))
        return read_group(footer, group, leaves, pieces)

    def close(self) -> None:
        self._spans.close()

    def __enter__(self) -> ChunkReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parquet_or(
    source: str,
    storage_options: dict[str, Any] | None,
    tar: Callable[[], T],
    parquet: Callable[[], T],
) -> T:
    """``parquet()`` where ``source`` names Parquet files by its form (or is a Hub repository
    whose files are Parquet), else ``tar()``; where that fails and the folder ``source`` names
    holds ``.parquet`` files and no ``.tar`` shards, ``parquet()`` (as ``make_loader``
    resolves a source: a damaged tar data set stays a tar data set's error)."""
    if is_parquet_source(source):
        return parquet()
    if hub_folder(source):  # a Hub repository: Parquet where its listing holds any
        try:
            return parquet()
        except NoParquet:
            return tar()
    try:
        return tar()
    except WdsToolError:
        folder = split_fragment(source)[0]
        if not parquet_in(folder, storage_options) or tars_in(folder, storage_options):
            raise
    return parquet()


__all__ = [
    "ChunkReader",
    "ParquetSet",
    "fetch",
    "open_parquet",
    "parquet_or",
    "read_footers",
]
