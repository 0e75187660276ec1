"""What img2dataset (and DataComp's download, which runs it) publishes beside each shard, read
for the shard's count and keys without reading the tar.

Per shard ``NAME.tar`` img2dataset writes ``NAME.parquet``, one row per sample it tried to
download (columns ``key``, ``status`` -- ``"success"``, ``"failed_to_download"``,
``"failed_to_resize"`` -- ``url``, ``caption``, ``error_message``, sizes, ``exif``...; only
``"success"`` rows are samples in the tar, in the tar's order) and ``NAME_stats.json``
(``count``, ``successes``, ``failed_to_download``...). Read here:

- the Parquet footer (one ranged read of its end: :func:`wdstool.format.parquet.read_footer`),
  then the ``key`` and ``status`` column chunks of every row group, neighbours fetched by one
  request where the bytes between are under ``MERGE`` (img2dataset writes a row group every
  100 rows: a shard of 10,000 samples has 100 of them, whose two small chunks lie ~15 KB apart;
  reading the gaps is cheaper than a request each): 2-3 requests and a few tens of KB a shard,
  where a header scan of its tar asks for the whole tar in pieces of 4 MB;
- ``_stats.json``'s ``successes``, which must agree with the Parquet's success rows (a shard
  whose files disagree is an error naming it, never a count picked from one of them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from wdstool.base.errors import ShardError
from wdstool.format.parquet import Footer, group_spans, read_footer, read_group

COLUMNS = ("key", "status")
SUCCESS = "success"
MERGE = 1 << 20  # chunks this close are fetched by one request (1 MB: ~20 ms of a link)
ReadSpan = Callable[[int, int], bytes]


def side_files(tar_url: str) -> tuple[str, str]:
    """The Parquet and the stats file img2dataset writes beside ``NAME.tar``."""
    if not tar_url.endswith(".tar"):
        raise ShardError(f"{tar_url}: not a .tar shard: img2dataset's side files name NAME.tar")
    stem = tar_url[: -len(".tar")]
    return f"{stem}.parquet", f"{stem}_stats.json"


@dataclass(frozen=True)
class SideCount:
    """One shard as its side files say: its samples' keys in the tar's order, and what the
    stats file says (-1: no stats file)."""

    keys: tuple[str, ...]
    successes: int = -1

    @property
    def nsamples(self) -> int:
        return len(self.keys)


def stats_successes(data: bytes, url: str) -> int:
    """``successes`` of an img2dataset ``_stats.json``; ShardError naming it where it has none."""
    try:
        obj = json.loads(data)
        value = obj["successes"]
        if type(value) is not int or value < 0:
            raise ValueError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ShardError(f"{url}: not img2dataset's stats (no 'successes' count)") from None
    return value


def key_spans(footer: Footer) -> list[tuple[int, int]]:
    """The byte ranges holding every row group's ``key`` and ``status`` chunks, merged where
    they lie under ``MERGE`` apart. ShardError naming the file where it lacks the columns."""
    md = footer.metadata
    have = {md.schema.column(i).path for i in range(md.num_columns)}
    missing = [c for c in COLUMNS if c not in have]
    if missing:
        raise ShardError(
            f"{footer.url}: no {', '.join(repr(c) for c in missing)} column: not the Parquet "
            "img2dataset writes beside a shard"
        )
    spans = sorted(s for g in range(md.num_row_groups) for s in group_spans(footer, g, COLUMNS))
    merged: list[tuple[int, int]] = []
    for a, b in spans:
        if merged and a - merged[-1][1] <= MERGE:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def success_keys(footer: Footer, pieces: list[tuple[int, bytes]]) -> tuple[str, ...]:
    """The keys of the rows whose status is ``"success"``, in file order, decoded from
    ``pieces`` (the bytes of :func:`key_spans`)."""
    keys: list[str] = []
    for g in range(footer.metadata.num_row_groups):
        table = read_group(footer, g, COLUMNS, pieces)
        status = table.column("status").to_pylist()
        key = table.column("key").to_pylist()
        keys.extend(str(k) for k, s in zip(key, status, strict=True) if s == SUCCESS)
    return tuple(keys)


def read_side(
    tar_url: str, parquet_size: int, read: Callable[[str, int, int], bytes], stats: bytes | None
) -> SideCount:
    """A shard's keys from its Parquet (``parquet_size`` bytes; ``read(url, start, end)``: a
    ranged read), checked against its stats file's bytes (None: it has none)."""
    parquet_url, stats_url = side_files(tar_url)
    footer = read_footer(parquet_url, parquet_size, lambda a, b: read(parquet_url, a, b))
    pieces = [(a, read(parquet_url, a, b)) for a, b in key_spans(footer)]
    keys = success_keys(footer, pieces)
    if stats is None:
        return SideCount(keys)
    said = stats_successes(stats, stats_url)
    if said != len(keys):
        raise ShardError(
            f"{tar_url}: its side files disagree: {stats_url} says {said} samples, "
            f"{parquet_url} lists {len(keys)} successes; count its tar "
            "(count_by='scan')"
        )
    return SideCount(keys, said)


__all__ = [
    "COLUMNS",
    "MERGE",
    "SUCCESS",
    "SideCount",
    "key_spans",
    "read_side",
    "side_files",
    "stats_successes",
    "success_keys",
]
