"""``inspect`` and ``verify`` of Parquet files (a file, folder, glob, ``s3://``, an ``http(s)``
brace pattern, ``hf://datasets/ORG/NAME#SPLIT``: what ``make_loader`` reads in place).

- :func:`inspect_parquet` reads the footers only (one ranged read a file): files, row groups
  and rows, the columns with their kinds and ``datasets`` feature types, the image and label
  columns, the ``ClassLabel`` names, bytes; no data.
- :func:`verify_parquet` reads every row group's image column (and the label column) by range,
  as the loader does: each group must decode and hold the rows its footer says, every image
  must be one (a known format whose header parses and that is not cut short; with ``decode``
  it is decoded), every label a class. It reads on past a damaged row group: each is named
  (file and row group) to ``on_damaged`` and in the report, and then
  :class:`DamagedRowGroups` says how many there are.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable
from typing import Any

from wdstool.base.errors import ConfigError, ShardError, WdsToolError
from wdstool.format.images import end_problem, fast_header
from wdstool.format.parquet import Columns, Footer
from wdstool.format.parquet_rows import group_columns, row_key
from wdstool.format.row_groups import ChunkReader, ParquetSet, open_parquet


class DamagedRowGroups(ShardError):
    """Row groups of Parquet files that do not read back; ``report`` is verify's whole report
    (``damaged`` lists them), for ``--json``."""

    def __init__(self, message: str, report: dict | None = None) -> None:
        super().__init__(message)
        self.report = report if report is not None else {}


def _image_column(columns: Columns, where: str) -> str | None:
    try:
        return columns.image(None, where)
    except ConfigError:
        return None


def _label_column(columns: Columns, where: str) -> str | None:
    try:
        return columns.label("cls", where)
    except ConfigError:
        return None


def inspect_parquet(
    source: str, *, nkeys: int = 5, storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Parquet source's summary from its footers alone; the first ``nkeys`` keys are those
    the loader gives the first file's rows."""
    ps = open_parquet(source, storage_options)
    cols = ps.columns
    image, label = _image_column(cols, source), _label_column(cols, source)
    chunk_bytes: dict[str, int] = dict.fromkeys(cols.names, 0)
    group_rows: list[int] = []
    files = []
    for ft in ps.footers:
        md = ft.metadata
        group_rows += ft.group_rows
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for j in range(rg.num_columns):
                c = rg.column(j)
                top = c.path_in_schema.split(".")[0]
                if top in chunk_bytes:
                    chunk_bytes[top] += c.total_compressed_size
        files.append(
            {
                "url": ft.url,
                "bytes": ft.size,
                "row_groups": md.num_row_groups,
                "rows": md.num_rows,
                "created_by": md.created_by,
            }
        )
    first = ps.footers[0].metadata.num_rows
    return {
        "format": "parquet",
        "source": source,
        "num_files": len(ps.footers),
        "num_row_groups": len(group_rows),
        "num_samples": ps.num_rows,
        "min_rows": min(group_rows, default=0),
        "max_rows": max(group_rows, default=0),
        "total_bytes": ps.total_bytes,
        "columns": [
            {
                "name": n,
                "kind": cols.kinds[n],
                "feature": cols.features.get(n),
                "bytes": chunk_bytes[n],
            }
            for n in cols.names
        ],
        "image_column": image,
        "label_column": label,
        "classes": list(cols.classes.get(label, ())) if label else [],
        "files": files,
        "sample_keys": [row_key(ps.prefixes[0], r) for r in range(min(nkeys, first))],
        "footer_bytes": ps.footer_bytes,
    }


def image_problem(data: Any, decode: bool) -> str | None:
    """Why ``data`` is not a readable image (None where it is): no bytes, no known format, a
    header that does not parse, cut short; with ``decode``, one that does not decode."""
    if not data:
        return "no image bytes"
    fast = fast_header(data)
    if fast is not None:
        fmt = fast[0]
    else:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(data)) as img:  # the header only: no pixels
                fmt = img.format or ""
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
            return f"not an image ({exc})"
    problem = end_problem(data, fmt)
    if problem is not None or not decode:
        return problem
    from wdstool.format.decode import decode_rgb

    try:
        decode_rgb(data)
    except WdsToolError as exc:
        return exc.message
    return None


def _check_group(
    chunks: ChunkReader,
    ft: Footer,
    g: int,
    *,
    image: str,
    label: str | None,
    leaves: list[str],
    nclasses: int,
    first_row: int,
    prefix: str,
    decode: bool,
) -> str | None:
    """What is wrong with row group ``g`` of ``ft`` (None: nothing)."""
    table = chunks.table(ft, g, leaves)
    want = ft.metadata.row_group(g).num_rows
    if table.num_rows != want:
        return f"holds {table.num_rows} rows; its footer says {want}"
    cols = group_columns(table, image, [label] if label else [])
    labels = cols[1] if label else [None] * table.num_rows
    for r, (data, value) in enumerate(zip(cols[0], labels, strict=True)):
        where = f"row {first_row + r} (key {row_key(prefix, first_row + r)!r})"
        problem = image_problem(data, decode)
        if problem is not None:
            return f"{where}: image column {image!r}: {problem}"
        if value is not None and nclasses and not -1 <= value < nclasses:
            return f"{where}: label {value} outside 0..{nclasses - 1} ({label!r})"
    return None


def verify_parquet(
    source: str,
    *,
    decode: bool = False,
    storage_options: dict[str, Any] | None = None,
    on_bytes: Callable[[int], object] | None = None,
    on_damaged: Callable[[str], object] | None = None,
) -> dict[str, Any]:
    """Read back every row group's image and label columns; returns the report, or raises
    :class:`DamagedRowGroups` (carrying it) naming the first damaged row group and how many
    there are. A label of -1 is "no label", as ``datasets`` writes it."""
    ps: ParquetSet = open_parquet(source, storage_options)
    image = ps.columns.image(None, source)
    label = _label_column(ps.columns, source)
    nclasses = len(ps.columns.classes.get(label, ())) if label else 0
    leaves = [leaf for n in (image, label) if n for leaf in ps.columns.leaves(n)]
    damaged: list[dict[str, Any]] = []
    rows = read = 0

    def count(n: int) -> None:
        nonlocal read
        read += n
        if on_bytes is not None:
            on_bytes(n)

    with ChunkReader(storage_options, count) as chunks:
        for f, ft in enumerate(ps.footers):
            md = ft.metadata
            starts = [0, *itertools.accumulate(ft.group_rows)]
            if starts[-1] != md.num_rows:
                damaged.append(
                    _damage(
                        ft,
                        None,
                        f"its row groups hold {starts[-1]} rows; its footer says {md.num_rows}",
                        on_damaged,
                    )
                )
            for g in range(md.num_row_groups):
                try:
                    problem = _check_group(
                        chunks,
                        ft,
                        g,
                        image=image,
                        label=label,
                        leaves=leaves,
                        nclasses=nclasses,
                        first_row=starts[g],
                        prefix=ps.prefixes[f],
                        decode=decode,
                    )
                except ShardError as exc:  # the file and row group are in the message
                    problem = exc.message.removeprefix(f"{ft.url}: ")
                if problem is not None:
                    damaged.append(_damage(ft, g, problem, on_damaged))
                rows += ft.group_rows[g]
    report = {
        "format": "parquet",
        "source": source,
        "num_files": len(ps.footers),
        "num_row_groups": ps.num_groups,
        "num_samples": rows,
        "total_bytes": ps.total_bytes,
        "bytes_read": read + ps.footer_bytes,
        "image_column": image,
        "label_column": label,
        "decoded": decode,
        "damaged": damaged,
        "warnings": [],
        "ok": not damaged,
    }
    if damaged:
        first = damaged[0]
        files = len({d["url"] for d in damaged})
        raise DamagedRowGroups(
            f"{source}: {len(damaged)} of {ps.num_groups} row group(s) in {files} of "
            f"{len(ps.footers)} file(s) damaged; the first: {first['line']}",
            report,
        )
    return report


def _damage(
    ft: Footer, group: int | None, problem: str, on_damaged: Callable[[str], object] | None
) -> dict[str, Any]:
    if group is None or problem.startswith(f"row group {group} "):
        line = f"{ft.url}: {problem}"
    else:
        line = f"{ft.url}: row group {group}: {problem}"
    if on_damaged is not None:
        on_damaged(line)
    return {"url": ft.url, "row_group": group, "problem": problem, "line": line}


__all__ = ["DamagedRowGroups", "image_problem", "inspect_parquet", "verify_parquet"]
