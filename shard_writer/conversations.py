"""SRC as a listing of conversations: fine-tuning sets as they are published.

A ``.json`` (a list of rows, as LLaVA publishes its files), JSON Lines or parquet listing whose
rows hold a conversation, in a ``conversations`` column (ShareGPT/LLaVA: ``[{"from": "human",
"value": "<image>\\nWhat is it?"}, {"from": "gpt", "value": ...}]``) or a ``messages`` column
(the OpenAI/Hugging Face form: ``[{"role": "user", "content": "..." or [{"type": "image"},
{"type": "text", "text": ...}]}, ...]``), is one sample per row: its conversation in
``KEY.json``'s ``messages`` (:mod:`wdstool.format.conversation`: roles, turns, where each image
goes) and its images as ``KEY.0.jpg``, ``KEY.1.png``, ... in reading order.

- Images: the row's ``image`` (a path, or a list: LLaVA's) or ``images`` (a list) column
  (``images_column=`` names another), one per ``<image>`` marker or image part, in order; a
  messages-form image part may name its file itself (``{"type": "image", "image": "a.jpg"}``).
  Paths are read as a listing's ``path`` is. A row may have no image (text-only turns, which
  every fine-tuning mix holds); a marker without its image is an error naming the row.
- Keys: the row's ``id`` where the listing has that column and its values are unique (as
  written, characters other than letters, digits, ``-`` and ``_`` replaced), else the row's
  position; ``key_column=`` names another column, which must then be there and unique.
- Labels (``label``) are a listing's; every other column goes into ``KEY.json``.

Every check is one error naming the file and the row, before any image is read.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from shard_writer.interleaved import Doc, InterleavedScan
from shard_writer.listing_read import Row
from shard_writer.row_values import column_labels, listing_folder, other_columns, resolve
from shard_writer.scan import SourceFile
from wdstool.base.errors import InputError
from wdstool.format.conversation import (
    ConversationError,
    from_messages,
    from_sharegpt,
    lists_of,
)

log = logging.getLogger(__name__)
COLUMNS = ("conversations", "messages")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def is_conversations(names: Sequence[str]) -> bool:
    """Whether a listing's columns hold conversations."""
    return any(c in names for c in COLUMNS)


def scan_conversations(
    url: str,
    fmt: str,
    names: list[str],
    rows: list[Row],
    *,
    images: str | None,
    label: str,
    key: str | None,
    storage_options: dict | None = None,
) -> InterleavedScan:
    """The rows of the conversation listing at ``url`` as documents (``images``: the images
    column, None: ``images`` else ``image``; ``key``: the key column, None: ``id`` where
    unique)."""
    if fmt in ("csv", "tsv"):
        raise InputError(
            f"{url}: a {fmt.upper()} listing cannot hold conversations; write it as JSON, "
            "JSON Lines or parquet"
        )
    conv = next(c for c in COLUMNS if c in names)
    images_col = images or next((c for c in ("images", "image") if c in names), None)
    if images is not None and images not in names:
        raise InputError(f"{url}: no {images!r} column (images_column=)")
    keys = _keys(url, names, rows, key)
    classes, labels = column_labels(url, rows, label if label in names else None, fmt)
    base = listing_folder(url)
    own = {conv, images_col, label}
    files: list[SourceFile] = []
    docs: list[Doc] = []
    for i, row in enumerate(rows):
        where = row.where()
        try:
            if conv == "conversations":
                messages = from_sharegpt(row.values.get(conv), where)
                refs: list[str | None] = [None] * sum(
                    p["type"] == "image" for m in messages for p in m["content"]
                )
            else:
                messages, refs = from_messages(row.values.get(conv), where)
        except ConversationError as exc:
            raise InputError(f"{url}: {exc}") from None
        paths = _paths(url, row, images_col, refs)
        doc_images = []
        for path in paths:
            doc_images.append(
                SourceFile(len(files), path, labels[i], -1, resolve(base, path), row.number)
            )
            files.append(doc_images[-1])
        texts, _ = lists_of(messages)
        row_file = SourceFile(
            index=i,
            relpath=doc_images[0].relpath if doc_images else "",
            class_idx=labels[i],
            size=-1,
            row=row.number,
            extra=other_columns(url, row, own),
            key=keys[i] if keys is not None else "",
        )
        docs.append(Doc(row_file, tuple(texts), tuple(doc_images), tuple(messages)))
    return InterleavedScan(
        root=base,
        classes=classes,
        files=tuple(files),
        problems=(),
        storage_options=storage_options,
        listing=url,
        docs=tuple(docs),
    )


def _paths(url: str, row: Row, col: str | None, refs: list[str | None]) -> list[str]:
    """Each image's path, in order: the part's own, else the next of the row's image column."""
    value = row.values.get(col) if col is not None else None
    listed = [value] if isinstance(value, str) else list(value or [])
    if value is not None and not isinstance(value, (str, list, tuple)):
        raise InputError(f"{url}: {row.where()}: {col} {value!r} is neither a path nor a list")
    it = iter(listed)
    out = []
    for n, ref in enumerate(refs):
        path = ref if ref is not None else next(it, None)
        if path is None:
            raise InputError(
                f"{url}: {row.where()}: image {n} of the conversation has no path "
                f"({col or 'image'!r} lists {len(listed)})"
            )
        if not isinstance(path, str) or not path:
            raise InputError(f"{url}: {row.where()}: an image path {path!r} is not a path")
        out.append(path)
    left = sum(1 for _ in it)
    if left:
        raise InputError(
            f"{url}: {row.where()}: {col!r} lists {len(listed)} image(s), the conversation "
            f"places {len(listed) - left} ({'<image>'} markers or image parts)"
        )
    return out


def _keys(url: str, names: Sequence[str], rows: list[Row], key: str | None) -> list[str] | None:
    """Each row's sample key from the key column (None: no key column, keys by position)."""
    col = key or ("id" if "id" in names else None)
    if col is None:
        return None
    if col not in names:
        found = ", ".join(repr(n) for n in names)
        raise InputError(f"{url}: no {col!r} column (key_column=; columns found: {found})")
    keys: list[str] = []
    seen: dict[str, Row] = {}
    for row in rows:
        raw = row.values.get(col)
        k = _UNSAFE.sub("_", str(raw)).strip("_") if isinstance(raw, (str, int)) else ""
        if not k or k in seen:
            why = (
                f"{seen[k].where()} and {row.where()} give the key {k!r}"
                if k
                else f"{row.where()} has no usable {col!r} ({raw!r})"
            )
            if key is not None:
                raise InputError(f"{url}: key_column={col!r}: {why}; keys must be unique")
            log.info("%s: %s: keys by row position instead", url, why)
            return None
        seen[k] = row
        keys.append(k)
    return keys


__all__ = ["COLUMNS", "is_conversations", "scan_conversations"]
