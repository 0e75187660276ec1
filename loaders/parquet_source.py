"""Parquet files as a source of the plan: row groups as its units, counts from the footers.

:func:`resolve_parquet` lists the files (:mod:`wdstool.format.parquet_files`), reads every
footer (one ranged read a file, 16 at a time, kept per host by the file's version in the cache
folder of :mod:`loaders.source_table`) and returns a :class:`ParquetIndex`: a
:class:`loaders.source.DatasetIndex` whose units are the files' non-empty row groups (``URL#rg=G``),
so the plan (exact epochs, equal batches, resume, mixtures) is the tars' own. Nothing but the
footers is read before the first batch.

:func:`parquet_schema` maps ``make_loader``'s label and fields onto the columns, at the call (errors name
the file and its columns): the image column (found by type, or ``image=``), ``label=`` a column
(the default ``"cls"`` takes the one ``ClassLabel`` column, whose names become the classes),
``fields=`` columns (``{"caption": "text"}``; ``"meta:a.b"`` a path into a struct or JSON
column). Only those columns' chunks are read (:func:`group_pieces`): ranged reads of the row
group's column chunks, through the per-host cache where the loader has one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import io
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loaders.cache import ShardCache
from loaders.schema import FieldsFn, SampleSchema
from loaders.source import DatasetIndex, ShardAccess
from loaders.source_table import cache_folder
from wdstool.base.errors import ShardError
from wdstool.base.remote import open_shard
from wdstool.base.urls import is_remote, local_path
from wdstool.format.parquet import (
    Columns,
    Footer,
    group_spans,
)
from wdstool.format.parquet_files import ParquetObject, list_parquet
from wdstool.format.row_groups import open_parquet, read_footers

log = logging.getLogger(__name__)
# a remote listing is kept this long for the host's other ranks (they start together and wait
# on the lock); short, as a file replaced meanwhile would be read with its old footer
LISTING_TTL = 30.0
SHARED_LIMIT = 1 << 30  # the host's cache of row groups split between readers, by default


@dataclass(frozen=True, kw_only=True)
class ParquetIndex(DatasetIndex):
    """A DatasetIndex over Parquet row groups: unit ``i`` is row group ``units[i][1]`` of file
    ``units[i][0]``; ``image`` and ``reads`` are the columns read (set by
    :func:`parquet_schema`), each other column a member under its own name."""

    footers: tuple[Footer, ...] = ()
    prefixes: tuple[str, ...] = ()
    units: tuple[tuple[int, int], ...] = ()
    columns: Columns | None = None
    image: str | None = None
    reads: tuple[str, ...] = ()

    def where(self, unit: int) -> tuple[Footer, int]:
        f, g = self.units[unit]
        return self.footers[f], g

    def leaves(self) -> list[str]:
        assert self.columns is not None
        names = ([self.image] if self.image else []) + list(self.reads)
        return [leaf for n in names for leaf in self.columns.leaves(n)]


def resolve_parquet(
    source: str, storage_options: dict[str, Any] | None, access: ShardAccess | None = None
) -> ParquetIndex:
    """The :class:`ParquetIndex` of ``source``'s files (``#SPLIT`` keeps one split)."""
    cache_dir = access.cache_dir if access else None
    with _host_lock(source, storage_options, cache_dir) as kept:
        objects, listed = _listing(source, storage_options, kept)
        found = open_parquet(
            source,
            storage_options,
            objects=objects,
            footers_of=lambda objs, on_read: footers_of(objs, storage_options, cache_dir),
        )
        if listed:
            _keep_listing(objects, kept)
    footers = found.footers
    units, urls, sizes = [], [], []
    h = hashlib.sha256(b"parquet\0")
    for i, ft in enumerate(footers):
        rows = ft.group_rows
        h.update(f"{ft.url}\0{ft.version or ft.size}\0{rows}\0".encode())
        for g, n in enumerate(rows):
            if n > 0:
                units.append((i, g))
                urls.append(f"{ft.url}#rg={g}")
                sizes.append(n)
    if not units:
        raise ShardError(f"{source}: its Parquet files hold no rows")
    return ParquetIndex(
        urls=tuple(urls),
        sizes=tuple(sizes),
        identity=h.hexdigest(),
        footers=footers,
        prefixes=found.prefixes,
        units=tuple(units),
        columns=found.columns,
    )


@contextlib.contextmanager
def _host_lock(
    source: str, storage_options: dict[str, Any] | None, cache_dir: Any
) -> Iterator[Path | None]:
    """Held by one process of the host while it lists a remote source and reads its footers:
    the host's other ranks wait, then take the listing it kept (``LISTING_TTL`` seconds)
    and the footers it kept, so a node of eight ranks asks the Hub's API once, not eight
    times. Yields where the listing is kept (None: a local source, or no writable cache)."""
    if not is_remote(source):
        yield None
        return
    folder = cache_folder(cache_dir) / "parquet-listings"
    options = json.dumps(storage_options or {}, sort_keys=True, default=str)
    endpoint = os.environ.get("HF_ENDPOINT", "") if source.startswith("hf://") else ""
    key = hashlib.sha256(f"{source}\0{options}\0{endpoint}".encode()).hexdigest()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield None
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield folder / key
    finally:
        os.close(fd)


def _listing(
    source: str, storage_options: dict[str, Any] | None, kept: Path | None
) -> tuple[list[ParquetObject], bool]:
    """The source's files, and whether they were listed now: the host's listing where another
    rank made it under ``LISTING_TTL`` seconds ago, else a new one."""
    if kept is not None:
        with contextlib.suppress(OSError, ValueError, TypeError):
            if time.time() - kept.stat().st_mtime < LISTING_TTL:
                return [ParquetObject(**o) for o in json.loads(kept.read_text())], False
    return list_parquet(source, storage_options), True


def _keep_listing(objects: list[ParquetObject], kept: Path | None) -> None:
    """Keep a listing for the host's other ranks (written once its footers are read: the ranks
    waiting on the lock find it fresh)."""
    if kept is not None:
        with contextlib.suppress(OSError):
            tmp = kept.with_suffix(f".{os.getpid()}.part")
            tmp.write_text(json.dumps([dataclasses.asdict(o) for o in objects]))
            os.replace(tmp, kept)


def footers_of(
    objects: Sequence[ParquetObject], storage_options: dict[str, Any] | None, cache_dir: Any
) -> list[Footer]:
    """Every file's footer: kept per host by version where the file has one, the others read
    in parallel (:func:`wdstool.format.row_groups.read_footers`) and kept."""
    folder = cache_folder(cache_dir) / "parquet-footers"

    def path_of(obj: ParquetObject) -> Path | None:
        if obj.version is None:
            return None
        return folder / hashlib.sha256(f"{obj.url}\0{obj.version}".encode()).hexdigest()

    out: dict[str, Footer] = {}
    for obj in objects:
        path = path_of(obj)
        if path is not None:
            with contextlib.suppress(OSError):
                out[obj.url] = Footer(obj.url, obj.size, path.read_bytes(), obj.version)
    missing = [obj for obj in objects if obj.url not in out]
    for obj, ft in zip(
        missing, read_footers(missing, storage_options) if missing else [], strict=True
    ):
        out[obj.url] = ft
        path = path_of(obj)
        if path is not None:
            with contextlib.suppress(OSError):  # a cache that cannot be written is no error
                folder.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.part")
                tmp.write_bytes(ft.tail)
                os.replace(tmp, path)
    return [out[obj.url] for obj in objects]


def parquet_schema(
    index: ParquetIndex,
    label: str | None,
    fields: Mapping[str, str] | None,
    fields_fn: FieldsFn | None,
    image: str | None,
    where: str,
) -> tuple[ParquetIndex, SampleSchema]:
    """make_loader's ``label``, ``fields`` and ``fields_fn`` on the columns: the index with the
    columns to read, and the schema reading them. ``label`` and each field name a column
    (``"meta:a.b"``: a path into a struct column). ConfigError naming ``where`` and the columns
    for a column that is not there or cannot mean what it is asked to."""
    cols = index.columns
    assert cols is not None
    names = {k: "txt" for k in fields} if isinstance(fields, Mapping) else fields
    base = SampleSchema.build(None, names, fields_fn)  # batch keys and fields_fn checked
    img = cols.image(image, where)
    reads: list[str] = []
    spec = None
    classes: tuple[str, ...] = ()
    if label is not None:
        spec = cols.label_spec(label, where)
        classes = cols.classes.get(spec.ext, ())
        reads.append(spec.ext)
    specs = [(key, cols.field(key, text, img, where)) for key, text in (fields or {}).items()]
    reads += [f.ext for _k, f in specs if f.ext not in reads]
    schema = replace(base, label=spec, fields=tuple(specs))
    return replace(index, image=img, reads=tuple(reads), classes=classes), schema


# --- reading a row group's column chunks --------------------------------------------------------
class _Span(io.RawIOBase):
    """Bytes ``[start, end)`` of a remote file as a stream from 0 (what the cache tees)."""

    def __init__(self, url: str, access: ShardAccess, start: int, end: int) -> None:
        super().__init__()
        self._f = open_shard(url, access.storage_options, retry=access.retry, limit=end)
        self._f.seek(start)
        self._start, self._pos, self._end = start, 0, end

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._pos = offset if whence == io.SEEK_SET else self._pos + offset
        self._f.seek(self._start + self._pos)
        return self._pos

    def readinto(self, b: Any) -> int:
        n = min(len(b), self._end - self._start - self._pos)
        if n <= 0:
            return 0
        data = self._f.read(n)
        b[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def close(self) -> None:
        self._f.close()
        super().close()


def _read_into(f: Any, n: int) -> memoryview:
    """Up to ``n`` bytes of ``f`` in one buffer, with no copy between the reader and it."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = f.readinto(view[got:])
        if not k:
            break
        got += k
    return view[:got]


def group_pieces(
    index: ParquetIndex, unit: int, access: ShardAccess, *, whole: bool = True
) -> list[tuple[int, memoryview]]:
    """The column chunks of unit ``unit`` that its reads need: (offset, bytes) each, by ranged
    reads (a local file by positioned reads). Remote chunks go through the loader's cache where
    it has one; a row group the plan splits between workers (``whole=False``) goes through the
    host's cache in any case (``SHARED_LIMIT`` bytes by default), so the workers and ranks of a
    host that read parts of it download it once."""
    footer, group = index.where(unit)
    spans = group_spans(footer, group, index.leaves())
    url = footer.url
    if not is_remote(url):
        with open(local_path(url), "rb", buffering=0) as f:
            return [(a, memoryview(os.pread(f.fileno(), b - a, a))) for a, b in spans]
    cache = None
    if access.cache_dir is not None:
        cache = ShardCache(access.cache_dir, access.cache_limit)
    elif not whole:
        cache = ShardCache(cache_folder(None) / "parquet-chunks", SHARED_LIMIT)
    # a cache entry's version: the file's, else its footer's bytes (where the store gives none)
    tag = footer.version.encode() if footer.version else footer.tail
    version = hashlib.sha256(tag).hexdigest()
    out = []
    for a, b in spans:
        if cache is not None:
            f = cache.open(
                f"{url}#bytes={a}-{b}",
                _Span(url, access, a, b),  # type: ignore[arg-type]
                reopen=lambda a=a, b=b: _Span(url, access, a, b),  # type: ignore[misc]
                version=version,
                size=b - a,
            )
        else:  # one GET of exactly the span, read straight into its buffer
            f = open_shard(url, access.storage_options, retry=access.retry, limit=b)
            f.seek(a)
        with f:
            data = _read_into(f, b - a)
        if len(data) != b - a:
            raise ShardError(
                f"{url}: ends before byte {b} (row group {group}); its footer says more"
            )
        out.append((a, data))
    return out


__all__ = ["ParquetIndex", "footers_of", "group_pieces", "parquet_schema", "resolve_parquet"]
