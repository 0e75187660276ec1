"""A Parquet row group's rows as a sample's members, keyed uniquely across a data set's files.

The image goes under the extension its bytes say, every other column under its own name (text
as UTF-8, integers in decimal, anything else as JSON); a row's key is its file's path below the
files' common folder and its row number in that file, so ``pack`` and the loaders key the same
row alike. No torch, no PIL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from wdstool.format.images import kind

_EXT = {"jpeg": "jpg", "png": "png", "webp": "webp", "gif": "gif"}


def image_ext(data: bytes) -> str:
    """The member extension an image's bytes call for (``jpg`` for what is not recognised: the
    decoder then names what is wrong)."""
    k = kind(data)
    if k in _EXT:
        return _EXT[k]
    if data[:2] == b"BM":
        return "bmp"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    return "jpg"


def member_bytes(value: Any) -> bytes:
    """A column's value as a member: text as UTF-8, integers and booleans in decimal, bytes as
    they are, anything else as JSON."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):
        return b"1" if value else b"0"
    if isinstance(value, int):
        return str(value).encode()
    return json.dumps(value, default=str, ensure_ascii=False).encode()


def group_columns(table: Any, image: str | None, others: Sequence[str]) -> tuple[list[Any], ...]:
    """(the images' bytes, then each other column's values) of a row group's table, as lists."""
    out: list[list[Any]] = []
    if image is not None:
        col = table.column(image)
        if str(col.type).startswith("struct"):
            col = col.combine_chunks().field("bytes")
        out.append(col.to_pylist())
    for name in others:
        out.append(table.column(name).to_pylist())
    return tuple(out)


def row_key(prefix: str, row: int) -> str:
    """The key of row ``row`` of the file whose key prefix is ``prefix``: unique across a data
    set's files, without a dot (WebDataset keys end at the first)."""
    return f"{prefix}-{row:06d}"


def key_prefixes(urls: Sequence[str]) -> list[str]:
    """Each file's key prefix: its path below the files' common folder, ``.parquet`` dropped,
    dots as underscores (``train/0000``, ``train-00000-of-00004``)."""
    paths = [u.split("?")[0] for u in urls]
    common = paths[0].rsplit("/", 1)[0] if len(paths) == 1 else _common_folder(paths)
    out = []
    for p in paths:
        rel = p[len(common) :].lstrip("/") if common else p
        if rel.endswith(".parquet"):
            rel = rel[: -len(".parquet")]
        out.append(rel.replace(".", "_"))
    return out


def _common_folder(paths: Sequence[str]) -> str:
    parts = [p.split("/")[:-1] for p in paths]
    common: list[str] = []
    for segs in zip(*parts, strict=False):
        if len(set(segs)) != 1:
            break
        common.append(segs[0])
    return "/".join(common)


def rows_of(
    table: Any, image: str | None, others: Sequence[str], names: Sequence[str] | None = None
) -> Iterator[dict[str, bytes]]:
    """Each row of a row group's table as members: the image under its extension, each of
    ``others`` under ``names`` (their own names by default); a null leaves its member out."""
    names = list(others) if names is None else list(names)
    cols = group_columns(table, image, others)
    images = cols[0] if image is not None else None
    rest = cols[1:] if image is not None else cols
    for r in range(table.num_rows):
        parts: dict[str, bytes] = {}
        if images is not None and images[r] is not None:
            parts[image_ext(images[r])] = images[r]
        for name, values in zip(names, rest, strict=True):
            if values[r] is not None:
                parts[name] = member_bytes(values[r])
        yield parts


__all__ = ["group_columns", "image_ext", "key_prefixes", "member_bytes", "row_key", "rows_of"]
