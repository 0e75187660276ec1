"""SRC as a listing of documents: rows of several images and texts (vision-language data).

A JSON Lines or parquet listing whose rows each hold a list of images is one sample per row,
written as :mod:`wdstool.format.interleaved` describes (``KEY.0.jpg``, ``KEY.1.png``, ...,
``KEY.json`` with ``texts`` and ``images``). The list column is ``images`` (``images_column=``
names another); a listing with it and no ``path`` column is read so without being told. A
row is one of two kinds, one for the whole listing:

- OBELICS style: a ``texts`` list column beside ``images``, the two read in parallel: at each
  position exactly one is not null, a text or an image's path;
- LLaVA style: a text column (``caption``, else ``text``; ``caption_column=`` names another)
  that refers to the images with ``<image>`` markers: the text is split at them, and the
  images go where they stand, in order; a row needs as many markers as images. A text
  without markers: the images come first, then the text. No text column: images only.

Paths are read as a listing's ``path`` is (relative to the listing's folder, absolute, or a
URL); a row may have no image (text only) but not neither, and may name an image twice. Labels (``label``) are a
listing's; every other column goes into ``KEY.json`` as the listing typed it. Every check
here is one error naming the file and the row, before any image is read; the images are
probed as any listing's (:mod:`shard_writer.interleaved_write`).
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_writer.listing_read import Row
from shard_writer.row_values import (
    column_labels,
    listing_folder,
    other_columns,
    resolve,
    text_value,
)
from shard_writer.scan import Scan, SourceFile
from wdstool.base.errors import InputError

MARKER = "<image>"


@dataclass(frozen=True, slots=True)
class Doc:
    """One row: ``file`` the row itself (its index and number, the first image's path for its
    key, its label and other columns), ``texts`` in reading order with None where an image
    stands, ``images`` those images in order (files of the scan, by their ``index``); a
    conversation's ``messages`` (roles and turns, its image parts in the images' order:
    :mod:`shard_writer.conversations`), None for a document."""

    file: SourceFile
    texts: tuple[str | None, ...]
    images: tuple[SourceFile, ...]
    messages: tuple[dict, ...] | None = None

    @property
    def chars(self) -> int:
        """The sample's text length in characters."""
        return sum(len(t) for t in self.texts if t is not None)


@dataclass(frozen=True, kw_only=True)
class InterleavedScan(Scan):
    """A listing of documents: ``files`` are every image of every row (what the probe reads),
    ``docs`` the rows."""

    docs: tuple[Doc, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Columns:
    """The columns of a listing of documents: the images' list, the label, the text (given
    by name, or None: ``caption``, else ``text``) and whether label and text were named."""

    images: str
    label: str
    label_given: bool
    caption: str | None


def scan_interleaved(
    url: str,
    fmt: str,
    names: list[str],
    rows: list[Row],
    cols: Columns,
    storage_options: dict | None = None,
) -> InterleavedScan:
    """The rows of the listing at ``url`` (format ``fmt``, columns ``names``) as documents."""
    if fmt in ("csv", "tsv"):
        raise InputError(
            f"{url}: a {fmt.upper()} listing cannot hold a list of images per row "
            f"({cols.images!r}); write it as JSON Lines or parquet"
        )
    for col, given, flag in (
        (cols.images, True, "images"),
        (cols.label, cols.label_given, "label"),
        (cols.caption, cols.caption is not None, "caption"),
    ):
        if given and col not in names:
            found = ", ".join(repr(n) for n in names) or "none"
            raise InputError(
                f"{url}: no {col!r} column (columns found: {found}); "
                f"name the {flag} column with {flag}_column="
            )
    parallel = "texts" if cols.caption is None and "texts" in names else None
    text_col = cols.caption or next((c for c in ("caption", "text") if c in names), None)
    if parallel:
        text_col = None
    classes, labels = column_labels(url, rows, cols.label if cols.label in names else None, fmt)
    base = listing_folder(url)
    own = {cols.images, cols.label, parallel or text_col}
    files: list[SourceFile] = []
    docs: list[Doc] = []
    for i, row in enumerate(rows):
        paths = _list(url, row, cols.images, "images")
        if parallel:
            texts = _parallel(url, row, cols.images, paths, _list(url, row, parallel, "texts"))
        else:
            if None in paths:
                raise InputError(f"{url}: {row.where()}: an image path None is not a path")
            text = text_value(url, row, text_col, "text") if text_col else ""
            texts = _marked(url, row, text, len(paths), text_col or "")
        images = []
        for path in (p for p in paths if p is not None):
            if not isinstance(path, str) or not path:
                raise InputError(f"{url}: {row.where()}: an image path {path!r} is not a path")
            at = resolve(base, path)
            images.append(SourceFile(len(files), path, labels[i], -1, at, row.number))
            files.append(images[-1])
        if not images and not any(texts):
            raise InputError(
                f"{url}: {row.where()}: neither an image nor a text ({cols.images!r} is empty)"
            )
        row_file = SourceFile(
            index=i,
            relpath=images[0].relpath if images else "",
            class_idx=labels[i],
            size=-1,
            row=row.number,
            extra=other_columns(url, row, own),
        )
        docs.append(Doc(row_file, texts, tuple(images)))
    return InterleavedScan(
        root=base,
        classes=classes,
        files=tuple(files),
        problems=(),
        storage_options=storage_options,
        listing=url,
        docs=tuple(docs),
    )


def _list(url: str, row: Row, col: str, what: str) -> list:
    value = row.values.get(col)
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise InputError(
            f"{url}: {row.where()}: {what} {value!r} is not a list ({type(value).__name__})"
        )
    return list(value)


def _text(url: str, row: Row, value: object, where: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{url}: {row.where()}: {where} {value!r} is not text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{url}: {row.where()}: {where} is not valid Unicode text") from None
    return value


def _parallel(
    url: str, row: Row, images_col: str, paths: list, texts: list
) -> tuple[str | None, ...]:
    """OBELICS style: the two lists, one non-null entry at each position."""
    if len(texts) != len(paths):
        raise InputError(
            f"{url}: {row.where()}: 'texts' has {len(texts)} entries, {images_col!r} "
            f"{len(paths)} (the two lists are read in parallel)"
        )
    out: list[str | None] = []
    for n, (t, p) in enumerate(zip(texts, paths, strict=True)):
        if (t is None) == (p is None):
            what = "both a text and an image" if t is not None else "neither a text nor an image"
            raise InputError(f"{url}: {row.where()}: position {n} holds {what}")
        out.append(None if t is None else _text(url, row, t, f"texts[{n}]"))
    return tuple(out)


def _marked(url: str, row: Row, text: str, images: int, col: str) -> tuple[str | None, ...]:
    """LLaVA style: ``text`` split at its ``<image>`` markers, an image at each (empty text
    pieces left out); no markers: the images first, then the text."""
    pieces = text.split(MARKER)
    markers = len(pieces) - 1
    if not markers:
        return (*([None] * images), *([text] if text else []))
    if markers != images:
        raise InputError(
            f"{url}: {row.where()}: {col!r} has {markers} {MARKER} marker(s) for {images} "
            "image(s); give one marker per image, or none (the images then come first)"
        )
    out: list[str | None] = []
    for n, piece in enumerate(pieces):
        if n:
            out.append(None)
        if piece:
            out.append(piece)
    return tuple(out)
