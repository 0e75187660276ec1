"""One worker's planned slices of Parquet row groups, as samples: fetched ahead, decoded by pyarrow.

The reads of the next row groups (their asked-for column chunks, :func:`loaders.parquet_source.
group_pieces`) run in a thread while the current one is decoded, as the next tar shard is opened
ahead. A row group that cannot be fetched or decoded is an error naming the file and the group;
under ``on_error="skip"`` its planned rows become placeholders (logged once per file), so every
plan position is still filled and no other worker reads anything different.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from loaders.parquet_source import ParquetIndex, group_pieces
from loaders.plan import Slice
from loaders.source import ShardAccess
from wdstool.base import counters
from wdstool.base.errors import ShardError, StorageError, WdsToolError
from wdstool.format.parquet import group_spans, read_group
from wdstool.format.parquet_rows import row_key, rows_of
from wdstool.format.shard_formats import Sample

log = logging.getLogger(__name__)
# row groups fetched ahead of the one being decoded: up to AHEAD, while they hold at most
# AHEAD_BYTES (one at least): the Hub's row groups of 100 rows run from 5 to 100 MB
AHEAD = 2
AHEAD_BYTES = 64 << 20


def parquet_samples(
    slices: Iterable[Slice],
    index: ParquetIndex,
    access: ShardAccess,
    *,
    skip_damaged: bool = False,
    warned: set[str] | None = None,
) -> Iterator[tuple[Slice, Sample | None, str]]:
    """(slice, sample, "") for each planned row, in order; (slice, None, why) for the rows of a
    damaged row group under ``skip_damaged``."""
    slices = list(slices)
    leaves = index.leaves()
    first_rows: dict[int, list[int]] = {}  # per file: the row number each group starts at
    pool = ThreadPoolExecutor(1, thread_name_prefix="parquet-ahead")
    ahead: deque[Future[list[tuple[int, bytes]]]] = deque()
    nxt = 0
    sizes: dict[int, int] = {}

    def size(unit: int) -> int:
        if unit not in sizes:
            footer, group = index.where(unit)
            sizes[unit] = sum(b - a for a, b in group_spans(footer, group, leaves))
        return sizes[unit]

    def fill(pos: int) -> None:
        nonlocal nxt
        while nxt < len(slices) and (
            nxt <= pos + 1
            or (
                nxt <= pos + AHEAD
                and sum(size(x.shard) for x in slices[pos + 1 : nxt + 1]) <= AHEAD_BYTES
            )
        ):
            s = slices[nxt]
            whole = s.start == 0 and s.stop == index.sizes[s.shard]
            ahead.append(pool.submit(group_pieces, index, s.shard, access, whole=whole))
            nxt += 1

    try:
        for pos, s in enumerate(slices):
            fill(pos)
            future = ahead.popleft()
            footer, group = index.where(s.shard)
            f = index.units[s.shard][0]
            done = 0
            try:
                pieces = future.result()
                counters.count("bytes_read", sum(len(b) for _a, b in pieces))
                table = read_group(footer, group, leaves, pieces)
                if table.num_rows != index.sizes[s.shard]:
                    raise ShardError(
                        f"{footer.url}: row group {group} holds {table.num_rows} rows; its "
                        f"footer said {index.sizes[s.shard]}"
                    )
                if f not in first_rows:
                    first_rows[f] = [0, *itertools.accumulate(footer.group_rows)]
                base = first_rows[f][group] + s.start
                rows = rows_of(table.slice(s.start, len(s)), index.image, index.reads)
                for i, parts in enumerate(rows):
                    yield s, Sample(row_key(index.prefixes[f], base + i), parts, 0), ""
                    done += 1
            except (ShardError, StorageError, OSError) as exc:
                if not skip_damaged:
                    raise
                why = exc.message if isinstance(exc, WdsToolError) else f"{footer.url}: {exc}"
                if warned is None or footer.url not in warned:
                    log.warning(
                        "damaged Parquet file: %s; the planned rows of row group %d are replaced",
                        why,
                        group,
                    )
                    if warned is not None:
                        warned.add(footer.url)
                for _ in range(len(s) - done):
                    yield s, None, why
    finally:
        for fut in ahead:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["parquet_samples"]
