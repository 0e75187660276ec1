"""SRC as a listing file: one row per image or video, in the order the shards' samples start from.

``wdstool pack LISTING DEST`` where LISTING is a ``.csv``, ``.tsv``, ``.json`` (a list of
rows), ``.jsonl`` or ``.parquet`` file, local or at any fsspec URL. Columns (renamed with :class:`ListingColumns`):

- ``path`` (required): the image or video (the probe tells them apart by their bytes), relative
  to the listing's folder (on S3 too), absolute, or a URL (``s3://...``, any fsspec URL). Two
  rows naming the same file are an error. Without a ``path`` column (and no ``path_column=``),
  a column named ``video`` is the path column.
- ``label`` (optional): integer labels or class names, never both. In a CSV/TSV every value is
  text: when every label is ASCII digits they are integers, otherwise all are names. In JSON
  Lines and parquet an int (>= 0) is an integer label and a string a name. Names are indexed in
  sorted order, as torchvision's ImageFolder indexes its folders, and recorded as the manifest's
  ``classes`` (empty for integer labels). Anything else (empty, null, negative, float, bool,
  list, object, ints mixed with names) is an error naming the row.
- ``caption`` (optional): text for ``KEY.txt``. When the column exists every sample gets one,
  empty where the row's caption is empty or null, so all samples carry the same members.
- every other column goes into ``KEY.json`` as the listing typed it. JSON cannot hold some
  parquet values: dates, times and timestamps become ISO 8601 strings and decimals exact
  strings; binary values and durations are an error naming the column.

A JSON Lines or parquet listing whose rows are documents of several images and texts (a list
column ``images`` and no ``path``; or ``images_column=``) is read by
:mod:`shard_writer.interleaved`; one whose rows are conversations (a ``conversations`` or
``messages`` column and no ``path``; also a ``.json`` file holding a list of rows, as LLaVA
publishes them) by :mod:`shard_writer.conversations`.

Everything is checked here, before any image is read: a bad listing is one error naming the
file and the row, never a partial dataset. The images are checked by the probe, as a tree's.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

from shard_writer import sources
from shard_writer.conversations import is_conversations, scan_conversations
from shard_writer.interleaved import Columns, scan_interleaved
from shard_writer.listing_read import FORMATS, Row, read_rows
from shard_writer.row_values import (
    column_labels,
    listing_folder,
    other_columns,
    resolve,
    text_value,
)
from shard_writer.scan import Scan, SourceFile, scan_imagefolder
from wdstool.base.credentials import redact
from wdstool.base.errors import ConfigError, InputError, StorageError
from wdstool.base.urls import is_remote, local_path

USE = "use .csv, .tsv, .json, .jsonl or .parquet"


@dataclass(frozen=True, kw_only=True)
class ListingColumns:
    """Which columns hold the path, the label and the caption (or, for samples of several
    images, the list of images). A name given here must exist in the listing; the defaults
    (``path``, ``label``, ``caption``) are optional but ``path``."""

    path: str | None = None
    label: str | None = None
    caption: str | None = None
    images: str | None = None
    key: str | None = None  # a listing of conversations: the column of the samples' keys

    def __post_init__(self) -> None:
        given = (("path", self.path), ("label", self.label), ("caption", self.caption))
        for opt, value in (*given, ("images", self.images), ("key", self.key)):
            if value is not None and not value:
                raise ConfigError(f"{opt}_column='': the column name is empty")
        names = self.names
        if len(set(names)) != 3:
            raise ConfigError(
                f"path_column=, label_column= and caption_column= must differ: {names}"
            )
        if self.images is not None and self.path is not None:
            raise ConfigError(
                "path_column= names one image per row, images_column= a list of images per "
                "row: choose one"
            )
        if self.images is not None and self.images in names[1:]:
            raise ConfigError(f"images_column={self.images!r} is also the label or caption column")

    @property
    def names(self) -> tuple[str, str, str]:
        return (self.path or "path", self.label or "label", self.caption or "caption")

    @property
    def given(self) -> bool:
        return (self.path, self.label, self.caption, self.images, self.key) != (None,) * 5


def listing_format(src: str) -> str | None:
    """The listing format SRC's name says, or None (a folder or prefix)."""
    return FORMATS.get(_suffix(src))


def _suffix(src: str) -> str:
    last = src.rstrip("/").rsplit("/", 1)[-1]
    return posixpath.splitext(last)[1].lower()


def unknown_format(src: str) -> str:
    return f"{src}: unknown listing format {_suffix(src)!r} ({USE})"


def scan_source(
    src: str, columns: ListingColumns | None = None, storage_options: dict | None = None
) -> Scan:
    """SRC as a :class:`Scan`: a listing file by its extension, else an ImageFolder tree."""
    columns = columns or ListingColumns()
    fmt = listing_format(src)
    if fmt is not None:
        return scan_listing(src, fmt, columns, storage_options)
    if columns.given:
        raise ConfigError(
            f"{src}: path_column=, label_column=, caption_column= and images_column= apply to "
            "a listing SRC "
            f"(a .csv, .tsv, .json, .jsonl or .parquet file), not to an ImageFolder tree"
        )
    path = local_path(src)
    if not is_remote(src) and not os.path.lexists(path):
        raise InputError(f"{src}: no such directory or listing file")
    if not is_remote(src) and os.path.exists(path) and not os.path.isdir(path):
        if _suffix(src):
            raise InputError(unknown_format(src))
        raise InputError(
            f"{src}: neither a directory (an ImageFolder tree SRC/<class>/<image>) "
            f"nor a listing file ({USE})"
        )
    try:
        return scan_imagefolder(src, storage_options)
    except InputError:
        if is_remote(src) and _suffix(src) and _is_object(src, storage_options):
            raise InputError(unknown_format(src)) from None
        raise


def _is_object(url: str, storage_options: dict | None) -> bool:
    try:
        sources.object_size(url, storage_options)
    except (sources.Missing, StorageError, InputError):
        return False
    return True


def scan_listing(
    url: str, fmt: str, columns: ListingColumns, storage_options: dict | None = None
) -> Scan:
    """Read and check the listing at ``url``; its rows become the scan's files, in row order."""
    names, rows = read_rows(_read(url, storage_options), fmt, url)
    if not rows:
        raise InputError(f"{url}: no rows (expected one row per image after the header)")
    path_col, label_col, caption_col = columns.names
    if (
        columns.path is None
        and path_col not in names
        and "video" in names
        and "video" not in (label_col, caption_col)
    ):
        path_col = "video"  # a listing of videos names its files so
    if columns.path is None and path_col not in names and is_conversations(names):
        return scan_conversations(
            url,
            fmt,
            names,
            rows,
            images=columns.images,
            label=label_col,
            key=columns.key,
            storage_options=storage_options,
        )
    if columns.key is not None:
        raise ConfigError(f"{url}: key_column= applies to a listing of conversations")
    images_col = columns.images or "images"
    if columns.images is not None or (
        columns.path is None and path_col not in names and images_col in names
    ):
        cols = Columns(
            images=images_col,
            label=label_col,
            label_given=columns.label is not None,
            caption=columns.caption,
        )
        return scan_interleaved(url, fmt, names, rows, cols, storage_options)
    for col, given, flag in (
        (path_col, True, "path"),
        (label_col, columns.label is not None, "label"),
        (caption_col, columns.caption is not None, "caption"),
    ):
        if given and col not in names:
            found = ", ".join(repr(n) for n in names) or "none"
            raise InputError(
                f"{url}: no {col!r} column (columns found: {found}); "
                f"name the {flag} column with {flag}_column="
            )
    classes, labels = column_labels(url, rows, label_col if label_col in names else None, fmt)
    base = listing_folder(url)
    own = {path_col, label_col, caption_col}
    captioned = caption_col in names
    files: list[SourceFile] = []
    seen: dict[str, Row] = {}
    for i, row in enumerate(rows):
        path = text_value(url, row, path_col, "path")
        if not path:
            raise InputError(f"{url}: {row.where()}: empty path")
        where = resolve(base, path)
        if where in seen:
            raise InputError(
                f"{url}: duplicate path {path!r} in {seen[where].where()} and {row.where()}"
            )
        seen[where] = row
        files.append(
            SourceFile(
                index=i,
                relpath=path,
                class_idx=labels[i],
                size=-1,
                url=where,
                row=row.number,
                caption=text_value(url, row, caption_col, "caption") if captioned else None,
                extra=other_columns(url, row, own),
            )
        )
    return Scan(
        root=base,
        classes=classes,
        files=tuple(files),
        problems=(),
        storage_options=storage_options,
        listing=url,
    )


def _read(url: str, storage_options: dict | None) -> bytes:
    if not is_remote(url):
        path = local_path(url)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise InputError(f"{url}: no such listing file") from None
        except IsADirectoryError:
            raise InputError(
                f"{url}: a directory, not a listing file (an ImageFolder tree's name "
                "cannot end in .csv, .tsv, .json, .jsonl or .parquet)"
            ) from None
        except OSError as exc:
            raise InputError(f"{url}: cannot read the listing: {exc.strerror or exc}") from None
    try:
        return sources.read_range(url, storage_options)
    except sources.Missing:
        raise InputError(f"{url}: no such listing file") from None
    except StorageError as exc:
        raise InputError(redact(exc.message, storage_options)) from None
