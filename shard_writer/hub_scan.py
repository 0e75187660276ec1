"""``pack``'s scan of Hub-style Parquet: a whole split's files, footers, small columns and labels.

What :mod:`shard_writer.hub` packs, found first: the files SRC names (as the loaders' sources
name them, :mod:`wdstool.format.parquet_files`; ``#SPLIT`` or ``split=`` keeps one split), each
file's footer (one ranged read), the columns checked alike in every file (ClassLabel names
too), the small columns read one row group at a time, the labels as a listing reads them, and
every row as a :class:`shard_writer.scan.SourceFile` keyed as the loader keys it
(:func:`wdstool.format.parquet.row_key`). The images are not read here.
"""

from __future__ import annotations

import bisect
import os
import posixpath
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from shard_writer.layout import ShardSpec
from shard_writer.listing_read import FORMATS, PARQUET_HINT, Row
from shard_writer.options import PackOptions
from shard_writer.row_values import column_labels, other_columns, text_value
from shard_writer.scan import Scan, SourceFile, printable
from wdstool.base.credentials import redact
from wdstool.base.errors import ConfigError, InputError, ShardError
from wdstool.base.urls import is_remote, local_path
from wdstool.base.web import is_web
from wdstool.format.indexes import split_fragment
from wdstool.format.parquet import Footer, columns_of, same_columns
from wdstool.format.parquet_files import (
    ParquetObject,
    hub_folder,
    is_parquet_source,
    list_parquet,
    parquet_in,
)
from wdstool.format.parquet_rows import key_prefixes, row_key
from wdstool.format.row_groups import ChunkReader, read_footers

THREADS = 8  # files whose footers and small columns the scan reads at once


@dataclass(frozen=True)
class HubGroup:
    """One row group of one file, and the index of its first row among the scan's rows."""

    start: int
    footer: Footer
    group: int
    rows: int
    name: str = ""  # the file below the files' common folder (what the skipped list names)


def _image_kind(field_type: Any) -> str | None:
    """ "struct" ({bytes, path}), "bytes" (binary) or None for a column that holds no images."""
    import pyarrow as pa

    if pa.types.is_binary(field_type) or pa.types.is_large_binary(field_type):
        return "bytes"
    if pa.types.is_struct(field_type):
        names = [field_type.field(i).name for i in range(field_type.num_fields)]
        if "bytes" in names and _image_kind(field_type.field("bytes").type) == "bytes":
            return "struct"
    return None


@dataclass(frozen=True, kw_only=True)
class HubScan(Scan):
    """A Hub Parquet SRC: its rows as files (``url`` empty: the image is in the file), where the
    images are (``column``, ``struct``: {bytes, path} structs) and every row group of every
    file in file order (``groups``)."""

    column: str = "image"
    struct: bool = True
    groups: tuple[HubGroup, ...] = ()

    @cached_property
    def starts(self) -> list[int]:
        return [g.start for g in self.groups]

    def group_of(self, f: SourceFile) -> HubGroup:
        return self.groups[bisect.bisect_right(self.starts, f.index) - 1]

    def describe(self, f: SourceFile, reason: str) -> str:
        path = f"{printable(f.relpath)}: " if f.relpath else ""
        return f"{self.group_of(f).footer.url}: row {f.row}: {path}{reason}"

    def task_fields(self, spec: ShardSpec) -> dict[str, Any]:
        """What a shard's :class:`HubShardTask` needs: only the row groups its samples are in."""
        used = {g.start: g for g in map(self.group_of, spec.samples)}
        groups = tuple(used[start] for start in sorted(used))
        return {"column": self.column, "struct": self.struct, "groups": groups}


def hub_scan(
    src: str,
    options: PackOptions,
    storage_options: dict[str, Any] | None,
    *,
    on_total: Callable[[int, int, str], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> HubScan | None:
    """SRC as Hub Parquet, or None when it is something else (a listing of paths, an
    ImageFolder tree). ``on_total``/``progress``: the scan's files ("scan" phase)."""
    url, split = _split(src, options.split)
    by_form = split is not None or is_parquet_source(url) or hub_folder(url)
    if not by_form and not _holds_parquet(url, storage_options):
        if options.image_column is not None:
            raise ConfigError(f"{src}: image_column= applies to a Parquet SRC")
        return None
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ConfigError(f"{src}: {PARQUET_HINT}") from None
    # one file named by its name: a listing of image paths where it holds no image column
    one_file = (
        split is None
        and url.lower().rstrip("/").endswith(".parquet")
        and not any(c in url for c in "*?[{")
        and (is_remote(url) or not os.path.isdir(local_path(url)))
    )
    if one_file and not is_remote(url) and not os.path.exists(local_path(url)):
        raise InputError(f"{url}: no such parquet file")
    shown = f"{url}#{split}" if split else url
    objects = list_parquet(url, storage_options, split=split)
    if on_total:
        on_total(len(objects), 0, "scan")
    footers = _footers(objects, storage_options)
    schema = footers[0].metadata.schema.to_arrow_schema()
    names = list(schema.names)
    column = options.image_column
    path_col, label_col, caption_col = options.columns.names
    if column is None:
        if (
            path_col in names
            or "image" not in names
            or _image_kind(schema.field("image").type) is None
        ):
            return _not_images(src, objects, by_form and not one_file, names)
        column = "image"
    first = footers[0].url
    if column not in names:
        found = ", ".join(repr(n) for n in names) or "none"
        raise InputError(
            f"{first}: no image column {column!r} (columns found: {found}); name the column "
            "holding the images with image_column="
        )
    kind = _image_kind(schema.field(column).type)
    if kind is None:
        raise InputError(
            f"{first}: column {column!r} holds {schema.field(column).type}, not images "
            '(raw bytes, or {"bytes", "path"} structs)'
        )
    for col, given, flag in (
        (label_col, options.label_column, "label"),
        (caption_col, options.caption_column, "caption"),
    ):
        if given is not None and col not in names:
            raise InputError(
                f"{first}: no {col!r} column; name the {flag} column with {flag}_column="
            )
    columns = _checked_columns(footers, label_col if label_col in names else None)
    others = [n for n in names if n != column]
    with_path = kind == "struct" and "path" in [
        schema.field(column).type.field(i).name for i in range(schema.field(column).type.num_fields)
    ]
    reads = others + ([f"{column}.path"] if with_path else [])

    def one(ft: Footer) -> tuple[list[Row], list[str]]:
        return _file_rows(ft, reads, others, column if with_path else None, storage_options)

    per_file: list[tuple[list[Row], list[str]]] = []
    with ThreadPoolExecutor(max(1, min(THREADS, len(footers)))) as pool:
        for part in pool.map(one, footers):
            per_file.append(part)
            if progress:
                progress(1)
    prefixes = key_prefixes([ft.url for ft in footers])
    if label_col in names:
        classes, labels = _labels(footers, [rows for rows, _ in per_file], label_col, columns)
    else:
        classes, labels = (), [-1] * sum(len(rows) for rows, _ in per_file)
    files: list[SourceFile] = []
    groups: list[HubGroup] = []
    captioned = caption_col in names
    rels = _relative(footers)
    for ft, prefix, rel, (rows, paths) in zip(footers, prefixes, rels, per_file, strict=True):
        start = len(files)
        for g, n in enumerate(ft.group_rows):
            groups.append(HubGroup(start, ft, g, n, rel))
            start += n
        for row, path in zip(rows, paths, strict=True):
            # without a caption column, SourceFile's default ("no caption") applies
            caption = (
                {"caption": text_value(ft.url, row, caption_col, "caption")} if captioned else {}
            )
            i = len(files)
            files.append(
                SourceFile(
                    index=i,
                    relpath=path,
                    class_idx=labels[i],
                    size=-1,
                    row=row.number,
                    extra=other_columns(ft.url, row, (label_col, caption_col)),
                    key=row_key(prefix, row.number - 1),
                    **caption,
                )
            )
    if not files:
        raise InputError(f"{shown}: no rows")
    return HubScan(
        root=url.rstrip("/"),
        classes=classes,
        files=tuple(files),
        problems=(),
        storage_options=storage_options,
        listing=shown,
        column=column,
        struct=kind == "struct",
        groups=tuple(groups),
    )


def _split(src: str, option: str | None) -> tuple[str, str | None]:
    """(SRC without its ``#SPLIT``, the split asked for by either)."""
    url, fragment = split_fragment(src)
    if fragment is not None and not is_remote(src) and os.path.exists(local_path(src)):
        url, fragment = src, None  # a local name with a '#' in it
    if option is not None and fragment is not None and option != fragment:
        raise ConfigError(f"{src}: split={option!r} and #{fragment} name different splits")
    return url, option or fragment


def _holds_parquet(url: str, storage_options: dict[str, Any] | None) -> bool:
    """Is ``url`` a folder or prefix with ``.parquet`` files in it or up to two folders below
    (its ``data/``, as in a Hub repository)?"""
    if not is_remote(url):
        if not os.path.isdir(local_path(url)):
            return False
    elif is_web(url) or posixpath.splitext(url.rstrip("/"))[1].lower() in FORMATS:
        return False  # no listing to glob, or a listing file's URL: never a prefix to list
    return parquet_in(url.rstrip("/"), storage_options)


def _not_images(
    src: str, objects: list[ParquetObject], parquet_named: bool, names: list[str]
) -> None:
    """None where SRC is a listing (one ``.parquet`` file of paths) or a folder that is an
    ImageFolder tree after all (``parquet_named`` false); else the error saying what
    the files lack."""
    if not parquet_named:
        return None
    found = ", ".join(repr(n) for n in names) or "none"
    raise InputError(
        f"{src}: {len(objects)} Parquet file(s) without an image column named 'image' "
        f"(columns found: {found}); name the column holding the images with image_column= "
        "(a listing of image paths is packed one file at a time)"
    )


def _relative(footers: Sequence[Footer]) -> list[str]:
    """Each file's path below the files' common folder (its name, for one file)."""
    paths = [ft.url.split("?")[0] for ft in footers]
    if len(paths) == 1:
        return [paths[0].rsplit("/", 1)[-1]]
    parts = [p.split("/")[:-1] for p in paths]
    n = 0
    for segs in zip(*parts, strict=False):
        if len(set(segs)) != 1:
            break
        n += 1
    return ["/".join(p.split("/")[n:]) for p in paths]


def _footers(objects: list[ParquetObject], storage_options: dict[str, Any] | None) -> list[Footer]:
    """Every file's footer (one ranged read a file, a second for a longer footer), parsed: a
    damaged one is an InputError naming its file."""
    try:
        footers = read_footers(objects, storage_options)
        for ft in footers:
            _ = ft.metadata
    except ShardError as exc:
        url, _, why = exc.message.partition(": ")
        raise InputError(
            redact(f"{url}: not a readable parquet file: {why}", storage_options)
        ) from None
    return footers


def _checked_columns(footers: Sequence[Footer], label: str | None) -> tuple[str, ...] | None:
    """The ClassLabel names of ``label`` (None where it is no ClassLabel), after checking that
    every file has the first one's columns and names: else an error naming the file."""
    first = columns_of(footers[0])
    names = first.classes.get(label) if label is not None else None
    for ft in footers[1:]:
        cols = columns_of(ft)
        try:
            same_columns(first, cols, ft.url)
        except ShardError as exc:
            raise InputError(exc.message) from None
        if label is not None and cols.classes.get(label) != names:
            raise InputError(
                f"{ft.url}: the ClassLabel names of {label!r} "
                f"({', '.join(cols.classes.get(label) or ()) or 'none'}) differ from the first "
                f"file's ({', '.join(names or ()) or 'none'})"
            )
    return tuple(names) if names else None


def _file_rows(
    ft: Footer,
    reads: list[str],
    others: list[str],
    column: str | None,
    storage_options: dict[str, Any] | None,
) -> tuple[list[Row], list[str]]:
    """One file's rows (its small columns, row group by row group) and each row's image path
    (``column``'s ``path`` field; empty without one)."""
    total = sum(ft.group_rows)
    if not reads:
        return [Row(r + 1, 0, {}) for r in range(total)], [""] * total
    rows: list[Row] = []
    paths: list[str] = []
    with ChunkReader(storage_options) as chunks:
        for g, n in enumerate(ft.group_rows):
            if n == 0:
                continue
            values = chunks.table(ft, g, reads).to_pylist()
            if len(values) != n:
                raise InputError(
                    f"{ft.url}: row group {g} holds {len(values)} rows; its footer says {n}"
                )
            for v in values:
                rows.append(Row(len(rows) + 1, 0, {k: v[k] for k in others}))
                paths.append(((v.get(column) or {}).get("path") or "") if column else "")
    return rows, paths


def _labels(
    footers: Sequence[Footer], rows: list[list[Row]], col: str, class_label: tuple[str, ...] | None
) -> tuple[tuple[str, ...], list[int]]:
    """Labels as a listing reads them (checked file by file, errors naming the file and row),
    ints or class names in every file alike; a ClassLabel's ints with its names as classes."""
    kinds: list[tuple[Footer, tuple[str, ...], list[int], list[Row]]] = []
    for ft, file_rows in zip(footers, rows, strict=True):
        if file_rows:
            classes, labels = column_labels(ft.url, file_rows, col, "parquet")
            kinds.append((ft, classes, labels, file_rows))
    if not kinds:
        return (), []
    named = [bool(classes) for _ft, classes, _l, _r in kinds]
    if any(named) and not all(named):
        odd = next(k for k, n in zip(kinds, named, strict=True) if n != named[0])
        what = ("class names", "ints") if named[0] else ("ints", "class names")
        raise InputError(
            f"{odd[0].url}: labels are {what[1]} where {kinds[0][0].url}'s are {what[0]} "
            "(a label column holds ints or class names, not both)"
        )
    if all(named):
        classes = tuple(sorted({c for _ft, cs, _l, _r in kinds for c in cs}))
        index = {c: i for i, c in enumerate(classes)}
        return classes, [index[cs[i]] for _ft, cs, labels, _r in kinds for i in labels]
    out = [label for _ft, _c, labels, _r in kinds for label in labels]
    if not class_label:
        return (), out
    for ft, _c, labels, file_rows in kinds:
        for row, label in zip(file_rows, labels, strict=True):
            if label >= len(class_label):
                raise InputError(
                    f"{ft.url}: {row.where()}: label {label} is past the {len(class_label)} "
                    "ClassLabel names"
                )
    return tuple(str(n) for n in class_label), out


__all__ = ["THREADS", "HubGroup", "HubScan", "hub_scan"]
