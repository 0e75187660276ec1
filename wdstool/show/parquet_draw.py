"""``wdstool show`` on Parquet files: rows drawn over the whole data set, read by their row
groups' column chunks.

The files' footers (:func:`wdstool.format.row_groups.open_parquet`: one ranged read a file)
say every row group's rows and where its column chunks lie, so rows are drawn by a seeded
generator, uniformly over all of them (every row when there are no more than asked for), and
only the row groups holding them are read: their chunks of the image column, the label column
and the columns shown as fields, each by a ranged read (neighbours merged), decoded by pyarrow.
The other rows of those row groups come with them: up to ``header_samples`` of them (those
after each shown row in its group) feed the statistics without another read.

The label is the ``ClassLabel`` column (else an integer column named ``label``) for the default
``cls``, its names the classes; ``--label COLUMN`` names another, and where no column fits the
default the rows have no label. The fields are the columns ``--field NAME=COLUMN`` names, by
default every column that holds neither the image nor the label nor other bytes. A row's key is
the loader's (:func:`wdstool.format.parquet.row_key`), so what the model sees is what training
with the same seed gets.
"""

from __future__ import annotations

import bisect
import itertools
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from wdstool.base.errors import ConfigError, ShardError
from wdstool.format.fields import FieldSpec, LabelSpec
from wdstool.format.parquet import Columns
from wdstool.format.parquet_rows import row_key, rows_of
from wdstool.format.row_groups import ChunkReader, ParquetSet, open_parquet, parquet_or
from wdstool.show.draw import Drawn
from wdstool.show.facts import Facts, image_ext, image_facts, read_label
from wdstool.show.ranged import ReadCounter
from wdstool.show.show_config import ShowConfig
from wdstool.show.source import DataSet, ParquetFacts, ShardInfo, open_dataset
from wdstool.show.walk import Picked

READ_THREADS = 8  # row groups read at once (requests to S3 or the Hub wait, they do not compute)
Fields = tuple[tuple[str, FieldSpec], ...]


@dataclass(frozen=True, kw_only=True)
class ParquetRows:
    """A Parquet source's files and what a report reads of them: the image column, the label
    (a spec reading its column's member) and the fields, and the columns those take."""

    files: ParquetSet
    image: str
    label: LabelSpec | None
    fields: Fields
    reads: tuple[str, ...]  # the columns read besides the image, as rows_of names members


def open_source(
    source: str, config: ShowConfig, storage_options: dict[str, Any] | None = None
) -> tuple[DataSet, ParquetRows | None]:
    """``source`` as a report reads it: a tar data set (None), or Parquet files (their rows),
    told apart as ``make_loader`` tells them."""
    return parquet_or(
        source,
        storage_options,
        lambda: (open_dataset(source, storage_options), None),
        lambda: open_rows(source, config, storage_options),
    )


def open_rows(
    source: str, config: ShowConfig, storage_options: dict[str, Any] | None = None
) -> tuple[DataSet, ParquetRows]:
    """The files' footers as a :class:`DataSet` (a file a shard), and the columns ``config``
    asks for; ConfigError naming the source and its columns where a column is not there."""
    ps = open_parquet(source, storage_options)
    cols = ps.columns
    image = cols.image(None, source)
    label, label_column = _label(cols, config, source)
    fields = _fields(cols, config, image, label_column, source)
    reads = [c for c in [label_column, *(s.ext for _, s in fields)] if c and c != image]
    rows = ParquetRows(
        files=ps,
        image=image,
        label=label,
        fields=fields,
        reads=tuple(dict.fromkeys(reads)),
    )
    ds = DataSet(
        source=source,
        shards=tuple(
            ShardInfo(url=ft.url, filesize=ft.size, nsamples=ft.metadata.num_rows)
            for ft in ps.footers
        ),
        classes=cols.classes.get(label_column, ()) if label_column else (),
        manifest_bytes=ps.footer_bytes,
        parquet=ParquetFacts(
            row_groups=ps.num_groups,
            columns=cols.describe(),
            image=image,
            label=label_column,
            footer_requests=ps.footer_requests,
        ),
    )
    return ds, rows


def _label(cols: Columns, config: ShowConfig, where: str) -> tuple[LabelSpec | None, str | None]:
    spec = config.label_spec
    if spec is None:
        return None, None
    if spec.field.path:
        raise ConfigError(
            f"{where}: label={config.label!r}: a Parquet row's label is a column; name it "
            f"(label='COLUMN') or pass label=None ({cols.describe()})"
        )
    try:
        name = cols.label(spec.field.text, where)
    except ConfigError:
        if config.label == ShowConfig.label:  # the default: rows without a label column
            return None, None
        raise
    return cols.label_spec(name, where), name


def _fields(cols: Columns, config: ShowConfig, image: str, label: str | None, where: str) -> Fields:
    if config.fields:
        asked = [(name, spec) for name, spec in config.fields]
    else:
        asked = [
            (n, n)
            for n in cols.names
            if n not in (image, label) and cols.kinds[n] not in ("binary", "image")
        ]
    out = [(name, cols.field(name, text, image, where)) for name, text in asked]
    return tuple(out)


def draw_rows(
    ds: DataSet,
    rows: ParquetRows,
    *,
    samples: int,
    seed: int,
    header_samples: int,
    counter: ReadCounter,
    storage_options: dict[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Drawn:
    """Draw ``samples`` rows (every row where there are no more) and read their row groups."""
    ps = rows.files
    total = ps.num_rows
    every = total <= samples
    rng = random.Random(f"wdstool-show:{seed}")
    chosen = range(total) if every else sorted(rng.sample(range(total), samples))
    file_starts = [0, *itertools.accumulate(ft.metadata.num_rows for ft in ps.footers)]
    group_starts = [[0, *itertools.accumulate(ft.group_rows)] for ft in ps.footers]
    groups: dict[tuple[int, int], list[int]] = {}  # (file, group) -> rows in the file
    for r in chosen:
        f = bisect.bisect_right(file_starts, r) - 1
        row = r - file_starts[f]
        g = bisect.bisect_right(group_starts[f], row) - 1
        groups.setdefault((f, g), []).append(row)
    walks = _walk_counts(len(chosen), 0 if every else header_samples)
    quota = {fg: [next(walks) for _ in shown] for fg, shown in sorted(groups.items())}
    lock = threading.Lock()

    def one(item: tuple[tuple[int, int], list[int]]) -> tuple[list[Picked], list[Facts]]:
        (f, g), shown = item
        ft = ps.footers[f]
        leaves = [leaf for n in (rows.image, *rows.reads) for leaf in ps.columns.leaves(n)]
        with ChunkReader(storage_options, counter.add) as chunks:
            table = chunks.table(ft, g, leaves)
        if table.num_rows != ft.group_rows[g]:
            raise ShardError(
                f"{ft.url}: row group {g} holds {table.num_rows} rows; its footer says "
                f"{ft.group_rows[g]}"
            )
        members = list(rows_of(table, rows.image, rows.reads))
        first = group_starts[f][g]

        def facts(row: int) -> Facts:
            key = row_key(ps.prefixes[f], row)
            return _facts(f, g, row, key, members[row - first], rows.label)

        picked = []
        for row in shown:
            picked.append(Picked(url=ft.url, facts=facts(row), parts=members[row - first]))
            if progress is not None:
                with lock:
                    progress(1)
        taken = set(shown)
        walked = []
        for row, n in zip(shown, quota[(f, g)], strict=True):
            after = (r for r in range(row + 1, first + len(members)) if r not in taken)
            for r in itertools.islice(after, n):
                taken.add(r)
                walked.append(facts(r))
        return picked, walked

    items = sorted(groups.items())
    with ThreadPoolExecutor(max_workers=max(1, min(READ_THREADS, len(items)))) as pool:
        results = list(pool.map(one, items))
    picked = tuple(p for shown, _ in results for p in shown)
    every_facts = [p.facts for p in picked] + [f for _, walked in results for f in walked]
    return Drawn(
        picked=picked,
        facts=tuple(sorted(every_facts, key=lambda f: (f.shard, f.offset))),
        every_sample=every,
    )


def _facts(
    f: int, g: int, row: int, key: str, parts: dict[str, bytes], label: LabelSpec | None
) -> Facts:
    ext = image_ext(parts)
    value, _problem = read_label(label, parts)  # a problem shows on the tile (read_meta)
    return Facts(
        shard=f,
        offset=row,
        nbytes=sum(len(v) for v in parts.values()),
        key=key,
        exts=tuple(parts),
        label=value,
        image=None if ext is None else image_facts(ext, parts[ext], len(parts[ext])),
        row_group=g,
    )


def _walk_counts(n: int, total: int) -> Iterator[int]:
    """How many rows to take after each of ``n`` shown ones: ``total`` spread evenly."""
    return iter([total // n + (i < total % n) for i in range(n)] if n else [])


__all__ = ["ParquetRows", "draw_rows", "open_rows", "open_source"]
