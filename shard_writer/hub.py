"""``pack`` from a Hub-style parquet file: the images are bytes inside the file.

Hugging Face Hub data sets ship as parquet files whose image column holds ``{"bytes", "path"}``
structs (the ``datasets`` ``Image`` feature) or raw bytes. ``--image-column NAME`` names it; a
parquet file without a path column and with a column named ``image`` of that type is taken as
one without being told. The other columns mean what they mean in a listing (label: ints, or
class names indexed in sorted order; a ``ClassLabel`` label's names come from the file's
``huggingface`` metadata, in its own order; caption: ``KEY.txt``; the rest: ``KEY.json``).

The file is never read whole: the scan reads the small columns (and the image column's ``path``
field), the probe and the shard writers read the image column one row group at a time, so memory
is bounded by ``--workers`` row groups, not by the file. That decides the order too: with
``--shuffle`` the row groups are permuted and the rows within each (seeded), so a shard draws on
one or two row groups, never on all of them; ``--no-shuffle`` keeps the row order.
"""

from __future__ import annotations

import bisect
import json
import random
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from shard_writer.image import BadImage
from shard_writer.listing_read import PARQUET_HINT, Row
from shard_writer.options import PackOptions
from shard_writer.probe import EncodeOptions, ImageInfo, Payload, info_of, rewritten, sort_probed
from shard_writer.row_values import column_labels, jsonable, listing_folder, text_value
from shard_writer.scan import Scan, Skipped, SourceFile
from shard_writer.write import ShardTask
from wdstool.base.credentials import redact
from wdstool.base.errors import ConfigError, InputError
from wdstool.base.s3 import filesystem
from wdstool.base.urls import is_remote, local_path


def _open(url: str, storage_options: dict[str, Any] | None) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` over the local file or an fsspec file (ranged reads)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"{url}: {PARQUET_HINT}") from None
    try:
        if not is_remote(url):
            return pq.ParquetFile(local_path(url))
        fs, path = filesystem(url, storage_options)
        return pq.ParquetFile(fs.open(path, "rb"))
    except FileNotFoundError:
        raise InputError(f"{url}: no such parquet file") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(
            redact(f"{url}: not a readable parquet file: {exc}", storage_options)
        ) from None


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
    """A Hub parquet SRC: its rows as files (``url`` empty: the image is in the file), and where
    the images are (``column``, ``struct``: {bytes, path} structs; rows per row group)."""

    column: str = "image"
    struct: bool = True
    group_rows: tuple[int, ...] = ()


def hub_scan(
    src: str, options: PackOptions, storage_options: dict[str, Any] | None
) -> HubScan | None:
    """SRC as a Hub parquet file, or None when it is something else (a listing of paths)."""
    if not src.rstrip("/").lower().endswith(".parquet"):
        if options.image_column is not None:
            raise ConfigError(f"{src}: image_column= applies to a .parquet SRC")
        return None
    pf = _open(src, storage_options)
    schema = pf.schema_arrow
    names = list(schema.names)
    column = options.image_column
    path_col, label_col, caption_col = options.columns.names
    if column is None:
        if (
            path_col in names
            or "image" not in names
            or _image_kind(schema.field("image").type) is None
        ):
            return None  # a listing of image paths (shard_writer.listing reads it)
        column = "image"
    if column not in names:
        found = ", ".join(repr(n) for n in names) or "none"
        raise InputError(
            f"{src}: no image column {column!r} (columns found: {found}); name the column "
            "holding the images with image_column="
        )
    kind = _image_kind(schema.field(column).type)
    if kind is None:
        raise InputError(
            f"{src}: column {column!r} holds {schema.field(column).type}, not images "
            '(raw bytes, or {"bytes", "path"} structs)'
        )
    for col, given, flag in (
        (label_col, options.label_column, "label"),
        (caption_col, options.caption_column, "caption"),
    ):
        if given is not None and col not in names:
            raise InputError(
                f"{src}: no {col!r} column; name the {flag} column with {flag}_column="
            )
    others = [n for n in names if n != column]
    rows = [Row(i, 0, r) for i, r in enumerate(_read(pf, src, others), 1)]
    paths = [""] * len(rows)
    if kind == "struct":
        paths = [(r[column] or {}).get("path") or "" for r in _read(pf, src, [f"{column}.path"])]
    if label_col in names:
        classes, labels = _hub_labels(src, rows, label_col, schema)
    else:
        classes, labels = (), [-1] * len(rows)
    files = []
    captioned = caption_col in names
    for i, row in enumerate(rows):
        extra = {
            k: jsonable(src, row, k, v)
            for k, v in row.values.items()
            if k not in (label_col, caption_col)
        }
        # without a caption column, SourceFile's default ("no caption") applies, as in a listing
        caption = {"caption": text_value(src, row, caption_col, "caption")} if captioned else {}
        files.append(
            SourceFile(
                index=i,
                relpath=paths[i],
                class_idx=labels[i],
                size=-1,
                row=row.number,
                extra=json.dumps(extra, sort_keys=True, separators=(",", ":")) if extra else "",
                **caption,
            )
        )
    if not files:
        raise InputError(f"{src}: no rows")
    md = pf.metadata
    return HubScan(
        root=listing_folder(src),
        classes=classes,
        files=tuple(files),
        problems=(),
        storage_options=storage_options,
        listing=src,
        column=column,
        struct=kind == "struct",
        group_rows=tuple(md.row_group(g).num_rows for g in range(md.num_row_groups)),
    )


def _read(pf: Any, src: str, columns: list[str]) -> list[dict[str, Any]]:
    import pyarrow as pa

    try:
        return pf.read(columns=columns, use_threads=False).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"{src}: not a readable parquet file: {exc}") from None


def _hub_labels(
    src: str, rows: list[Row], col: str, schema: Any
) -> tuple[tuple[str, ...], list[int]]:
    """Labels as a listing reads them, or a ClassLabel's ints with its names as the classes."""
    meta = json.loads((schema.metadata or {}).get(b"huggingface", b"{}") or b"{}")
    feature = meta.get("info", {}).get("features", {}).get(col, {})
    names = feature.get("names") if feature.get("_type") == "ClassLabel" else None
    classes, labels = column_labels(src, rows, col, "parquet")
    if not names or classes:
        return classes, labels
    for row, label in zip(rows, labels, strict=True):
        if label >= len(names):
            raise InputError(
                f"{src}: {row.where()}: label {label} is past the {len(names)} ClassLabel names"
            )
    return tuple(str(n) for n in names), labels


def _group_images(task: tuple[str, dict | None, str, bool, int]) -> list[bytes | None]:
    url, storage_options, column, struct, group = task
    col = (
        _open(url, storage_options)
        .read_row_group(group, columns=[column], use_threads=False)
        .column(column)
    )
    values = col.combine_chunks()
    if struct:
        values = values.field("bytes")
    return values.to_pylist()


def _probe_group(
    url: str,
    storage_options: dict | None,
    column: str,
    struct: bool,
    group: int,
    encode: EncodeOptions,
) -> list[ImageInfo | str]:
    """Check the images of one row group (a task: one row group in memory at a time)."""
    out: list[ImageInfo | str] = []
    for data in _group_images((url, storage_options, column, struct, group)):
        if not data:
            out.append("no image (null or empty)")
            continue
        try:
            img = encode.apply(data, verify_decode=encode.verify_decode)
        except BadImage as exc:
            out.append(str(exc))
            continue
        out.append(info_of(img, len(data)))
    return out


def probe_hub(
    scan: HubScan,
    encode: EncodeOptions,
    *,
    fail: bool,
    progress: Callable[[int], None] | None = None,
    pool: Executor | None = None,
) -> tuple[list[SourceFile], list[ImageInfo], list[Skipped]]:
    """As :func:`shard_writer.probe.probe_files`, a task per row group."""
    groups = range(len(scan.group_rows))
    args = (
        [scan.listing] * len(groups),
        [scan.storage_options] * len(groups),
        [scan.column] * len(groups),
        [scan.struct] * len(groups),
        list(groups),
        [encode] * len(groups),
    )
    parts = map(_probe_group, *args) if pool is None else pool.map(_probe_group, *args)
    results: list[ImageInfo | str] = []
    for part in parts:
        results.extend(part)
        if progress:
            progress(len(part))
    return sort_probed(scan, list(scan.files), results, fail)


def hub_order(
    scan: HubScan, files: list[SourceFile], infos: list[ImageInfo], shuffle: bool, seed: int
) -> tuple[list[SourceFile], list[ImageInfo]]:
    """The samples in write order: row groups in a seeded order, rows shuffled within each."""
    if not shuffle:
        return files, infos
    starts = _starts(scan.group_rows)
    by_group: dict[int, list[int]] = {}
    for i, f in enumerate(files):
        by_group.setdefault(bisect.bisect_right(starts, f.index) - 1, []).append(i)
    rng = random.Random(seed)
    order = sorted(by_group)
    rng.shuffle(order)
    picked = []
    for g in order:
        rows = by_group[g]
        rng.shuffle(rows)
        picked.extend(rows)
    return [files[i] for i in picked], [infos[i] for i in picked]


def _starts(group_rows: tuple[int, ...]) -> list[int]:
    starts, at = [], 0
    for n in group_rows:
        starts.append(at)
        at += n
    return starts


@dataclass(frozen=True, kw_only=True)
class HubShardTask(ShardTask):
    """A pack shard whose images come out of a parquet file's row groups, one at a time."""

    column: str = "image"
    struct: bool = True
    group_rows: tuple[int, ...] = ()

    def payloads(self) -> Iterator[Payload]:
        starts = _starts(self.group_rows)
        current, values = -1, []
        for f, info in zip(self.spec.samples, self.spec.infos, strict=True):
            group = bisect.bisect_right(starts, f.index) - 1
            if group != current:
                values = _group_images(
                    (self.root_url, self.storage_options, self.column, self.struct, group)
                )
                current = group
            data = values[f.index - starts[group]] or b""
            try:
                payload = rewritten(data, info, self.encode)
            except BadImage as exc:
                raise InputError(self.describe_row(f, str(exc))) from None
            if not self.encode.rewrites and len(data) != info.payload_size:
                raise InputError(
                    self.describe_row(f, "changed during pack (another size than when probed)")
                )
            yield payload

    @property
    def root_url(self) -> str:
        return self.listing or ""

    def describe_row(self, f: SourceFile, reason: str) -> str:
        return f"{self.listing}: row {f.row}: {reason}"
