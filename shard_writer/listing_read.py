"""Read a listing file's bytes into rows: CSV, TSV, JSON (a list of rows), JSON Lines or parquet.

A row is a dict of column -> value, numbered from 1 in file order (the header line of a CSV or
TSV is not a row), with the physical line it starts on for the text formats, so messages can
say ``list.csv: row 3 (line 4): ...``. Values keep the types the format has: every CSV/TSV value
is a string; JSON Lines and parquet keep theirs. Nothing here knows what the columns mean
(:mod:`shard_writer.listing` does).

- CSV/TSV: UTF-8 (a BOM is allowed), a header line naming the columns, RFC 4180 quoting
  (``"a, b"``, ``""`` for a quote; fields may span lines); TSV is the same with tabs, which is
  what ``pandas.to_csv(sep="\\t")`` writes. Blank lines are ignored; a row with another number of
  fields than the header, or bad quoting, is an error.
- JSON Lines: one JSON object per line (blank lines ignored); ``NaN``/``Infinity`` are not JSON.
- JSON: one list of objects (LLaVA's conversation files), rows numbered in list order.
- Parquet: needs pyarrow (``pip install -e '.[parquet]'``).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any

from wdstool.base.errors import ConfigError, InputError

FORMATS = {".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "jsonl", ".parquet": "parquet"}
PARQUET_HINT = "reading a .parquet listing needs pyarrow: pip install -e '.[parquet]'"


@dataclass(frozen=True, slots=True)
class Row:
    number: int  # 1-based, in file order
    line: int  # the line it starts on (text formats), else 0
    values: dict[str, Any]

    def where(self) -> str:
        if self.line and self.line != self.number:
            return f"row {self.number} (line {self.line})"
        return f"row {self.number}"


def read_rows(data: bytes, fmt: str, name: str) -> tuple[list[str], list[Row]]:
    """(columns in file order, rows) of a listing; ``name`` (its path or URL) goes into every
    error. Raises InputError (one line) for an empty file or a row that does not parse."""
    if not data:
        raise InputError(f"{name}: empty file (expected one row per image)")
    if fmt in ("csv", "tsv"):
        return _delimited(_text(data, name), name, "," if fmt == "csv" else "\t")
    if fmt == "jsonl":
        return _json_lines(_text(data, name), name)
    if fmt == "json":
        return _json_list(_text(data, name), name)
    if fmt == "parquet":
        return _parquet(data, name)
    raise ValueError(f"unknown listing format {fmt!r}")


def _text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{name}: not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r})"
        ) from None


def _check_columns(columns: list[str], name: str) -> None:
    seen: set[str] = set()
    for c in columns:
        if c in seen:
            raise InputError(f"{name}: column {c!r} appears twice in the header")
        seen.add(c)


def _delimited(text: str, name: str, delimiter: str) -> tuple[list[str], list[Row]]:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    header: list[str] | None = None
    rows: list[Row] = []
    consumed = 0  # physical lines read so far
    while True:
        start = consumed + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            what = "the header" if header is None else f"row {len(rows) + 1} (line {start})"
            raise InputError(f"{name}: {what} does not parse: {exc}") from None
        consumed = reader.line_num
        if not fields:
            continue  # a blank line
        if header is None:
            header = fields
            _check_columns(header, name)
            continue
        row = Row(len(rows) + 1, start, dict(zip(header, fields, strict=False)))
        if len(fields) != len(header):
            raise InputError(
                f"{name}: {row.where()} has {len(fields)} fields, the header has {len(header)}"
            )
        rows.append(row)
    if header is None:
        raise InputError(f"{name}: empty file (expected a header line naming the columns)")
    return header, rows


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _json_lines(text: str, name: str) -> tuple[list[str], list[Row]]:
    columns: dict[str, None] = {}
    rows: list[Row] = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        row_no = len(rows) + 1
        at = Row(row_no, lineno, {}).where()
        try:
            obj = json.loads(line, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{name}: {at} is not valid JSON: {exc.msg} (column {exc.colno})"
            ) from None
        except ValueError as exc:
            raise InputError(f"{name}: {at} is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise InputError(f"{name}: {at} is not a JSON object ({type(obj).__name__})")
        columns.update(dict.fromkeys(obj))
        rows.append(Row(row_no, lineno, obj))
    return list(columns), rows


def _json_list(text: str, name: str) -> tuple[list[str], list[Row]]:
    """A JSON file holding a list of rows (objects), as LLaVA publishes its conversations."""
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{name}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except ValueError as exc:
        raise InputError(f"{name}: not valid JSON: {exc}") from None
    if not isinstance(obj, list):
        raise InputError(
            f"{name}: a .json listing is a list of rows (objects), not a {type(obj).__name__}"
        )
    columns: dict[str, None] = {}
    rows: list[Row] = []
    for n, row in enumerate(obj, 1):
        if not isinstance(row, dict):
            raise InputError(f"{name}: row {n} is not a JSON object ({type(row).__name__})")
        columns.update(dict.fromkeys(row))
        rows.append(Row(n, 0, row))
    return list(columns), rows


def _parquet(data: bytes, name: str) -> tuple[list[str], list[Row]]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"{name}: {PARQUET_HINT}") from None
    try:
        # ParquetFile without threads starts no thread: pq.read_table's dataset reader leaves a
        # pool thread behind that can abort the interpreter at exit ("terminate called without
        # an active exception", apache/arrow#34314; seen here with pyarrow 26)
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
        records = table.to_pylist()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"{name}: not a readable parquet file: {exc}") from None
    _check_columns(table.column_names, name)
    return table.column_names, [Row(i, 0, r) for i, r in enumerate(records, 1)]
