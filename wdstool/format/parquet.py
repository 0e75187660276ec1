"""Parquet files read in place: footers, the columns as a schema, one row group's columns by range.

A Parquet file ends with its footer (``<metadata><4-byte length>PAR1``): the row groups, their
row counts and, per column chunk, where its bytes lie. So the loaders and the tools read

- the **footer** of each file by one ranged read of its last :data:`TAIL` bytes (a second
  only for a footer longer than that): exact counts per row group before any data;
- the **schema** from it: the image column (the ``datasets`` ``Image`` feature, a
  ``{bytes, path}`` struct, or a binary column named by the caller), the ``ClassLabel`` names
  of the ``huggingface`` metadata, the other columns' types;
- **one row group's chunks of the columns asked for**, each a ranged read (neighbours merged
  when the gap is small), decoded by pyarrow from those bytes alone (:func:`read_group`);
- each row as a sample's members (:mod:`wdstool.format.parquet_rows`).

pyarrow, never pickle; no torch, no PIL.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from wdstool.base.errors import ConfigError, ShardError
from wdstool.format.fields import FieldSpec, Kind, LabelSpec

# bytes read at a file's end for its footer: a 32nd of the file, between 8 and 64 KB (a second
# read where the footer is longer); a footer grows with the row groups and columns
TAIL = 64 << 10
MIN_TAIL = 8 << 10
# pyarrow reads up to 100 bytes past a column chunk's compressed size (PARQUET-816's padding
# for old writers); a span asked for carries that much more
PAD = 128
MERGE_GAP = 8 << 10  # column chunks this close are fetched by one request
MAGIC = b"PAR1"
Span = tuple[int, int]
ReadSpan = Callable[[int, int], bytes]  # bytes [start, end) of one file


def _pq() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        raise ConfigError("reading Parquet needs pyarrow: pip install pyarrow") from None
    return pq


@dataclass(frozen=True)
class Footer:
    """One file's footer: its URL, size, version and the footer's bytes (metadata + 8)."""

    url: str
    size: int
    tail: bytes
    version: str | None = None

    @cached_property
    def metadata(self) -> Any:
        import pyarrow as pa

        try:
            return _pq().read_metadata(pa.py_buffer(self.tail))
        except Exception as exc:
            raise ShardError(f"{self.url}: unreadable Parquet footer: {exc}") from None

    @property
    def group_rows(self) -> tuple[int, ...]:
        md = self.metadata
        return tuple(md.row_group(g).num_rows for g in range(md.num_row_groups))

    def __getstate__(self) -> dict[str, Any]:  # the parsed metadata is rebuilt where needed
        return {k: v for k, v in self.__dict__.items() if k != "metadata"}


def read_footer(url: str, size: int, read: ReadSpan, version: str | None = None) -> Footer:
    """The footer of the file ``url`` of ``size`` bytes: one read of its last :data:`TAIL` bytes,
    a second where the footer is longer. ShardError naming the file where it is no Parquet."""
    if size < 12:
        raise ShardError(f"{url}: not a Parquet file ({size} bytes)")
    data = read(max(0, size - min(TAIL, max(MIN_TAIL, size // 32))), size)
    if len(data) < 8 or data[-4:] != MAGIC:
        raise ShardError(f"{url}: not a Parquet file (no PAR1 at its end)")
    n = int.from_bytes(data[-8:-4], "little")
    if n + 12 > size:
        raise ShardError(f"{url}: damaged Parquet footer (length {n} for {size} bytes)")
    if n + 8 > len(data):  # only the part of the footer not read yet
        data = read(size - n - 8, size - len(data)) + data
    return Footer(url, size, bytes(data[-(n + 8) :]), version)


# --- the columns as a schema ---------------------------------------------------------------
@dataclass(frozen=True)
class Columns:
    """What a data set's columns are: names in order, a kind each (``image``: a ``{bytes,
    path}`` struct; ``binary``, ``int``, ``float``, ``bool``, ``string``, ``other``), the
    ``datasets`` feature type of each where the file says (``Image``, ``ClassLabel``...) and the
    class names of ``ClassLabel`` columns."""

    names: tuple[str, ...]
    kinds: dict[str, str] = field(default_factory=dict)
    features: dict[str, str] = field(default_factory=dict)
    classes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def describe(self) -> str:
        return ", ".join(f"{n} ({self.features.get(n) or self.kinds[n]})" for n in self.names)

    def image(self, asked: str | None, where: str) -> str:
        """The image column: ``asked`` (checked to hold bytes), else the one ``Image`` feature,
        else the one ``{bytes, path}`` struct, else a lone binary column."""
        if asked is not None:
            if asked not in self.kinds:
                raise ConfigError(f"{where}: image={asked!r}: no such column ({self.describe()})")
            if self.kinds[asked] not in ("image", "binary"):
                raise ConfigError(
                    f"{where}: image={asked!r} is a {self.kinds[asked]} column, not image bytes"
                )
            return asked
        for candidates in (
            [n for n in self.names if self.features.get(n) == "Image"],
            [n for n in self.names if self.kinds[n] == "image"],
            [n for n in self.names if self.kinds[n] == "binary"],
        ):
            if len(candidates) == 1:
                return candidates[0]
            if len(candidates) > 1:
                raise ConfigError(
                    f"{where}: several image columns ({', '.join(candidates)}): name one, "
                    f"Source(url, image={candidates[0]!r})"
                )
        raise ConfigError(f"{where}: no image column ({self.describe()})")

    def label(self, asked: str, where: str) -> str:
        """The label column: ``asked``, or for the default ``"cls"`` where no column has that
        name, the one ``ClassLabel`` column, else a column named ``label``."""
        if asked in self.kinds:
            if self.kinds[asked] not in ("int", "bool"):
                raise ConfigError(
                    f"{where}: label={asked!r} is a {self.kinds[asked]} column, not integers"
                )
            return asked
        if asked == "cls":
            labels = [n for n in self.names if self.features.get(n) == "ClassLabel"]
            if len(labels) == 1:
                return labels[0]
            if not labels and self.kinds.get("label") == "int":
                return "label"
        raise ConfigError(
            f"{where}: label={asked!r}: no such integer column ({self.describe()}); name one "
            "(label='COLUMN') or pass label=None"
        )

    def field(self, key: str, text: str, image: str | None, where: str) -> FieldSpec:
        """The batch key ``key``'s spec ``text``: a column (``"meta:a.b"``: a path into a
        struct column) read as a string column's text, bytes, or the value (JSON) else; a
        ConfigError naming ``where`` for a column that is not there or is the image."""
        column, _, path = str(text).partition(":")
        if column not in self.kinds:
            raise ConfigError(
                f"{where}: fields[{key!r}]={text!r}: no such column ({self.describe()})"
            )
        if column == image:
            raise ConfigError(f"{where}: fields[{key!r}]={text!r}: {image!r} is the image column")
        kind = self.kinds[column]
        if path or kind not in ("string", "binary", "image"):
            read_as = Kind.JSON
        else:
            read_as = Kind.TEXT if kind == "string" else Kind.BYTES
        return FieldSpec(column, read_as, tuple(path.split(".")) if path else (), str(text))

    def label_spec(self, asked: str, where: str) -> LabelSpec:
        """:meth:`label`'s column as a label spec (its values are decimal integers)."""
        name = self.label(asked, where)
        return LabelSpec(FieldSpec(name, Kind.BYTES, (), name))

    def leaves(self, column: str) -> tuple[str, ...]:
        """The column paths pyarrow reads for ``column`` (an image struct: its bytes only)."""
        return (f"{column}.bytes",) if self.kinds.get(column) == "image" else (column,)


def columns_of(footer: Footer) -> Columns:
    """The columns of a file, from its footer."""
    import pyarrow as pa

    schema = footer.metadata.schema.to_arrow_schema()
    kinds = {f.name: _kind(f.type, pa) for f in schema}
    features: dict[str, str] = {}
    classes: dict[str, tuple[str, ...]] = {}
    meta = (schema.metadata or {}).get(b"huggingface")
    if meta:
        try:
            feats = json.loads(meta).get("info", {}).get("features", {})
        except (ValueError, AttributeError):
            feats = {}
        for name, feat in (feats or {}).items():
            if isinstance(feat, dict) and isinstance(feat.get("_type"), str):
                features[name] = feat["_type"]
                if feat["_type"] == "ClassLabel" and isinstance(feat.get("names"), list):
                    classes[name] = tuple(str(x) for x in feat["names"])
    return Columns(tuple(f.name for f in schema), kinds, features, classes)


def _kind(t: Any, pa: Any) -> str:
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        if "bytes" in names and _kind(t.field("bytes").type, pa) == "binary":
            return "image"
        return "other"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    return "other"


def same_columns(first: Columns, other: Columns, url: str) -> None:
    """ShardError naming ``url`` where its columns differ from the first file's."""
    if (first.names, first.kinds) != (other.names, other.kinds):
        raise ShardError(
            f"{url}: its columns ({other.describe()}) differ from the first file's "
            f"({first.describe()})"
        )


# --- one row group, its asked-for column chunks by range ------------------------------------
def group_spans(footer: Footer, group: int, leaves: Sequence[str]) -> list[Span]:
    """The byte ranges holding row group ``group``'s chunks of ``leaves`` (column paths),
    merged where the gap is under :data:`MERGE_GAP`, each :data:`PAD` longer (clamped)."""
    rg = footer.metadata.row_group(group)
    wanted = set(leaves)
    spans = []
    for j in range(rg.num_columns):
        c = rg.column(j)
        if c.path_in_schema not in wanted and not any(
            c.path_in_schema.startswith(w + ".") for w in wanted
        ):
            continue
        start = c.data_page_offset
        if c.has_dictionary_page and 0 < c.dictionary_page_offset < start:
            start = c.dictionary_page_offset
        spans.append((start, min(footer.size, start + c.total_compressed_size + PAD)))
    spans.sort()
    merged: list[Span] = []
    for a, b in spans:
        if merged and a - merged[-1][1] <= MERGE_GAP:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


class _Pieces(io.RawIOBase):
    """A file of ``size`` bytes of which only some spans (and the footer) are known: what pyarrow
    reads one row group from. A read outside them is an OSError (a bug, never a fetch)."""

    def __init__(self, size: int, pieces: list[tuple[int, bytes]]) -> None:
        super().__init__()
        self._size, self._pieces, self._pos = size, pieces, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def read(self, n: int = -1) -> bytes:
        n = self._size - self._pos if n is None or n < 0 else n
        end = min(self._size, self._pos + n)
        for at, data in self._pieces:
            if at <= self._pos and end <= at + len(data):
                out = data[self._pos - at : end - at]
                self._pos = end
                return out  # a view: pyarrow copies what it keeps
        raise OSError(f"bytes {self._pos}-{end} were not fetched")

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def read_group(
    footer: Footer, group: int, columns: Sequence[str], pieces: list[tuple[int, bytes]]
) -> Any:
    """Row group ``group`` of ``columns`` (column paths) as a pyarrow Table, decoded from
    ``pieces`` ((offset, bytes) of :func:`group_spans`) and the footer alone. ShardError naming
    the file and row group where the bytes do not decode."""
    import pyarrow as pa

    known = [*pieces, (footer.size - len(footer.tail), footer.tail)]
    try:
        f = _pq().ParquetFile(
            pa.PythonFile(_Pieces(footer.size, known), mode="r"), metadata=footer.metadata
        )
        return f.read_row_group(group, columns=list(columns), use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ShardError(f"{footer.url}: row group {group} does not decode: {exc}") from None


__all__ = [
    "TAIL",
    "Columns",
    "Footer",
    "columns_of",
    "group_spans",
    "read_footer",
    "read_group",
    "same_columns",
]
