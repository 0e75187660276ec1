"""``pack`` from Hub-style Parquet: the images are bytes inside the files, a whole split at once.

SRC names Parquet files as the loaders' sources do (:mod:`wdstool.format.parquet_files`): one
file, a folder (every ``.parquet`` beneath it), a glob (``data/train-*.parquet``), an ``s3://``
prefix or glob, an ``http(s)`` brace pattern, or ``hf://datasets/ORG/NAME[@REV][/PATH]`` (the
Hub's tree API); ``#SPLIT`` after it, or ``split=``, keeps one split, and a source holding
several splits with none named is a one-line error listing them. A folder or prefix is Parquet
when ``.parquet`` files lie in it (or in its ``data/`` folder, as in a Hub repository) and hold
an image column; otherwise it is an ImageFolder tree, as before.

Hugging Face Hub data sets ship as Parquet files whose image column holds ``{"bytes", "path"}``
structs (the ``datasets`` ``Image`` feature) or raw bytes. ``--image-column NAME`` names it; files
without a path column and with a column named ``image`` of that type are taken as such without
being told (a single ``.parquet`` file with a path column is a listing: :mod:`shard_writer.listing`).
The other columns mean what they mean in a listing (label: ints, or class names indexed in
sorted order; a ``ClassLabel`` label's names come from the ``huggingface`` metadata, in its own
order; caption: ``KEY.txt``; the rest: ``KEY.json``). The files of a split must have the same
columns (and ClassLabel names): a file that differs is a one-line error naming it.

Keys are the loader's (:func:`wdstool.format.parquet.row_key`): each file's key prefix (its path
below the files' common folder, :func:`~wdstool.format.parquet.key_prefixes`) and the row's
number in that file, so keys are unique across the files of a split, and the rows packed to
tars and the same rows streamed in place by the loader have the same keys.

No file is read whole: each file's footer is read once (one ranged read), the scan reads the
small columns (and the image column's ``path`` field) one row group at a time, and the probe and
the shard writers read the image column's chunks of one row group at a time, by range; memory is
bounded by ``--workers`` row groups, not by the files. That decides the order too: with
``--shuffle`` the (file, row group) pairs are permuted and the rows within each (seeded), so a
shard draws on one or two row groups, never on all of them; ``--no-shuffle`` keeps the file
order, then the row order.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from functools import cached_property

from shard_writer.hub_scan import HubGroup, HubScan, hub_scan
from shard_writer.image import BadImage
from shard_writer.probe import EncodeOptions, ImageInfo, Payload, info_of, rewritten
from shard_writer.scan import Skipped, SourceFile, printable
from shard_writer.write import ShardTask
from wdstool.base.errors import InputError
from wdstool.format.parquet import Footer
from wdstool.format.parquet_rows import group_columns
from wdstool.format.row_groups import ChunkReader


def _group_images(
    footer: Footer, group: int, column: str, struct: bool, storage_options: dict | None
) -> list[bytes | None]:
    """The images of one row group: its chunks of the image column (the bytes field of a
    struct), by range."""
    leaves = [f"{column}.bytes"] if struct else [column]
    with ChunkReader(storage_options) as chunks:
        return group_columns(chunks.table(footer, group, leaves), column, ())[0]


def _probe_group(
    footer: Footer,
    group: int,
    column: str,
    struct: bool,
    storage_options: dict | None,
    encode: EncodeOptions,
) -> list[ImageInfo | str]:
    """Check the images of one row group (a task: one row group in memory at a time)."""
    out: list[ImageInfo | str] = []
    for data in _group_images(footer, group, column, struct, storage_options):
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
    """As :func:`shard_writer.probe.probe_files`, a task per row group; a skipped row is
    listed by its file (below the files' common folder) and its row in that file."""
    groups = [g for g in scan.groups if g.rows]
    args = (
        [g.footer for g in groups],
        [g.group for g in groups],
        [scan.column] * len(groups),
        [scan.struct] * len(groups),
        [scan.storage_options] * len(groups),
        [encode] * len(groups),
    )
    parts = map(_probe_group, *args) if pool is None else pool.map(_probe_group, *args)
    results: list[ImageInfo | str] = []
    for part in parts:
        results.extend(part)
        if progress:
            progress(len(part))
    good, infos, skipped = [], [], []
    for f, res in zip(scan.files, results, strict=True):
        if isinstance(res, ImageInfo):
            good.append(replace(f, size=res.source_size))
            infos.append(res)
        elif fail:
            raise InputError(scan.describe(f, res))
        else:
            skipped.append(Skipped(printable(scan.group_of(f).name), res, f.row))
    return good, infos, skipped


def hub_order(
    scan: HubScan, files: list[SourceFile], infos: list[ImageInfo], shuffle: bool, seed: int
) -> tuple[list[SourceFile], list[ImageInfo]]:
    """The samples in write order: (file, row group) pairs in a seeded order, rows shuffled
    within each; without the shuffle, file order then row order."""
    if not shuffle:
        return files, infos
    by_group: dict[int, list[int]] = {}
    for i, f in enumerate(files):
        by_group.setdefault(bisect.bisect_right(scan.starts, f.index) - 1, []).append(i)
    rng = random.Random(seed)
    order = sorted(by_group)
    rng.shuffle(order)
    picked = []
    for g in order:
        rows = by_group[g]
        rng.shuffle(rows)
        picked.extend(rows)
    return [files[i] for i in picked], [infos[i] for i in picked]


@dataclass(frozen=True, kw_only=True)
class HubShardTask(ShardTask):
    """A pack shard whose images come out of Parquet row groups, one at a time (``groups``:
    the row groups its samples are in, by their first row)."""

    column: str = "image"
    struct: bool = True
    groups: tuple[HubGroup, ...] = ()

    def payloads(self) -> Iterator[Payload]:
        current: HubGroup | None = None
        values: list[bytes | None] = []
        for f, info in zip(self.spec.samples, self.spec.infos, strict=True):
            group = self.group_of(f)
            if group is not current:
                values = _group_images(
                    group.footer, group.group, self.column, self.struct, self.storage_options
                )
                current = group
            data = values[f.index - group.start] or b""
            try:
                payload = rewritten(data, info, self.encode)
            except BadImage as exc:
                raise InputError(self.describe_row(f, str(exc))) from None
            if not self.encode.rewrites and len(data) != info.payload_size:
                raise InputError(
                    self.describe_row(f, "changed during pack (another size than when probed)")
                )
            yield payload

    @cached_property
    def starts(self) -> list[int]:
        return [g.start for g in self.groups]

    def group_of(self, f: SourceFile) -> HubGroup:
        return self.groups[bisect.bisect_right(self.starts, f.index) - 1]

    def describe_row(self, f: SourceFile, reason: str) -> str:
        return f"{self.group_of(f).footer.url}: row {f.row}: {reason}"


__all__ = ["HubScan", "HubShardTask", "hub_order", "hub_scan", "probe_hub"]
