"""A listing row's values as a pack stores them, for every source of rows (a listing file,
:mod:`shard_writer.listing`; a Hub parquet file, :mod:`shard_writer.hub`).

- labels: integer labels or class names, never both. In a CSV/TSV every value is text: when
  every label is ASCII digits they are integers, otherwise all are names. In JSON Lines and
  parquet an int (>= 0) is an integer label and a string a name. Names are indexed in sorted
  order (torchvision's ImageFolder order). Anything else is an error naming the row.
- text (a caption): a string or null (empty), valid Unicode.
- every other column: as JSON can hold it (dates, times and timestamps as ISO 8601 strings,
  decimals as exact strings); anything else is an error naming the column.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import os
import posixpath
import re
from collections.abc import Collection
from typing import Any

from shard_writer.listing_read import Row
from wdstool.base.errors import InputError
from wdstool.base.urls import is_remote, local_path

_DIGITS = re.compile(r"[0-9]+")


def listing_folder(url: str) -> str:
    """The folder a listing's relative paths resolve against (``url``'s folder): absolute for a
    local listing."""
    if is_remote(url):
        return url.rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(local_path(url)))


def text_value(url: str, row: Row, col: str, what: str) -> str:
    """Column ``col`` of ``row`` as text (``""`` when null or missing); a one-line InputError
    naming the row and ``what`` the column is when it is not valid text."""
    value = row.values.get(col)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(
            f"{url}: {row.where()}: {what} {value!r} is not text ({type(value).__name__})"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{url}: {row.where()}: {what} is not valid Unicode text") from None
    return value


def _label_kind(value: Any, typed: bool) -> str | None:
    """ "int", "name", or None for a value that is neither."""
    if isinstance(value, str):
        if not value.strip():
            return None
        return "int" if not typed and _DIGITS.fullmatch(value) else "name"
    if typed and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return "int"
    return None


def column_labels(
    url: str, rows: list[Row], col: str | None, fmt: str
) -> tuple[tuple[str, ...], list[int]]:
    """The label column ``col`` read as the rules above say (``fmt``: the listing's format):
    (classes, label per row), with ``((), [-1] * len(rows))`` without a label column."""
    if col is None:
        return (), [-1] * len(rows)
    typed = fmt in ("jsonl", "parquet")
    kinds = []
    for row in rows:
        value = row.values.get(col)
        kind = _label_kind(value, typed)
        if kind is None:
            shown = (
                "(empty)"
                if value is None or (isinstance(value, str) and not value.strip())
                else f"{value!r} ({type(value).__name__})"
            )
            raise InputError(
                f"{url}: {row.where()}: label {shown} is neither an int nor a name "
                "(labels are ints >= 0 or class names)"
            )
        kinds.append(kind)
    values = [row.values[col] for row in rows]
    if not typed:  # CSV/TSV: integers only when every label is digits
        if all(k == "int" for k in kinds):
            return (), [int(v) for v in values]
        classes = tuple(sorted(set(values)))
    else:
        first = kinds[0]
        for row, kind in zip(rows, kinds, strict=True):
            if kind != first:
                raise InputError(
                    f"{url}: {row.where()}: label {row.values[col]!r} is neither an int nor a "
                    f"name like the others ({rows[0].where()} has {rows[0].values[col]!r}; "
                    "a label column holds ints or class names, not both)"
                )
        if first == "int":
            return (), list(values)
        classes = tuple(sorted(set(values)))
    index = {c: i for i, c in enumerate(classes)}
    return classes, [index[v] for v in values]


def jsonable(url: str, row: Row, col: str, value: Any) -> Any:
    """A column's value as JSON can hold it; one-line InputError naming the column if not."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(
                f"{url}: {row.where()}: column {col!r} holds {value}, which JSON cannot hold"
            )
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(url, row, col, v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(url, row, col, v) for k, v in value.items()}
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()  # also datetime and pandas.Timestamp (subclasses)
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise InputError(
        f"{url}: {row.where()}: column {col!r} holds {type(value).__name__} values, which "
        "KEY.json cannot hold (drop or convert the column)"
    )


def other_columns(url: str, row: Row, own: Collection[str | None]) -> str:
    """The row's columns other than ``own`` as ``KEY.json``'s text (keys sorted, compact; ""
    where there are none), each value checked by :func:`jsonable`."""
    extra = {k: jsonable(url, row, k, v) for k, v in row.values.items() if k not in own}
    return json.dumps(extra, sort_keys=True, separators=(",", ":")) if extra else ""


def resolve(base: str, path: str) -> str:
    """Where a listing's ``path`` is: a URL as is, an absolute path as is, a relative path
    against the listing's folder ``base`` (a local folder or a URL)."""
    if "://" in path:
        return local_path(path)
    if path.startswith("/"):
        return path
    if not is_remote(base):
        return os.path.normpath(os.path.join(base, path))
    scheme, rest = base.split("://", 1)
    bucket, _, prefix = rest.partition("/")
    return f"{scheme}://{bucket}{posixpath.normpath(posixpath.join('/', prefix, path))}"
