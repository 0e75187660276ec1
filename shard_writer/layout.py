"""Which sample goes into which shard: a pure function of (files, seed, limits).

Nothing here reads a file. Sizes come from the scan (or from a measuring pass when images are
re-encoded), so the layout is known before any shard is written. That is what makes packing
parallel, resumable and byte-identical whatever the number of workers.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from shard_writer.members import sample_bound
from shard_writer.probe import ImageInfo
from shard_writer.scan import SourceFile
from wdstool.base.errors import ConfigError
from wdstool.format.tar_write import BLOCK, END

END_OF_ARCHIVE = len(END)
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def sample_key(f: SourceFile, width: int = 9, start: int = 0) -> str:
    """A unique, stable, dot-free key: position in the source (ImageFolder position or listing
    row index; plus ``start`` in an appended version) and a readable stem; or the key the
    source gives (a Hub Parquet row's: its file's key prefix and its row in that file)."""
    if f.key:
        return f.key
    stem = f.relpath.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    stem = _KEY_UNSAFE.sub("_", stem)[:40].strip("_")
    key = f"{f.index + start:0{width}d}"
    return f"{key}_{stem}" if stem else key


@dataclass(frozen=True, kw_only=True)
class LayoutOptions:
    """Shard size limits and the pack-time shuffle."""

    max_count: int = 10_000
    max_size: int = 256 * 1000**2
    shuffle: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_count < 1:
            raise ConfigError(f"max_count must be >= 1, got {self.max_count}")
        if self.max_size < 4 * BLOCK:
            raise ConfigError(f"max_size must be at least {4 * BLOCK} bytes, got {self.max_size}")


@dataclass(frozen=True, kw_only=True)
class ShardSpec:
    """One shard to write: its position, file name, samples in member order and size bound."""

    index: int
    name: str
    samples: tuple[SourceFile, ...]
    infos: tuple[ImageInfo, ...]
    keys: tuple[str, ...]
    size_bound: int


def shard_name(prefix: str, index: int, total: int) -> str:
    width = max(6, len(str(max(total - 1, 0))))
    return f"{prefix}-{index:0{width}d}.tar"


def group_samples(needs: Sequence[int], options: LayoutOptions) -> list[list[int]]:
    """Sample indices per shard: samples in source order, or shuffled (seeded) first; a shard
    closes before ``max_count`` samples or ``max_size`` bytes would be exceeded (``needs``: the
    bytes each sample takes in a shard). A shard exceeds ``max_size`` only when a single sample
    does. Pure: pack and reshard lay out their shards with it."""
    order = list(range(len(needs)))
    if options.shuffle:
        random.Random(options.seed).shuffle(order)
    groups: list[list[int]] = []
    current: list[int] = []
    current_bytes = END_OF_ARCHIVE
    for i in order:
        need = needs[i]
        full = len(current) >= options.max_count or current_bytes + need > options.max_size
        if current and full:
            groups.append(current)
            current, current_bytes = [], END_OF_ARCHIVE
        current.append(i)
        current_bytes += need
    if current:
        groups.append(current)
    return groups


@dataclass(frozen=True, kw_only=True)
class Numbering:
    """Where an appended version's names start: its first shard's index and first key number
    (both 0 for a new data set)."""

    first_shard: int = 0
    first_key: int = 0


def plan_layout(
    files: Sequence[SourceFile],
    classes: Sequence[str],
    *,
    options: LayoutOptions,
    prefix: str = "train",
    infos: Sequence[ImageInfo],
    numbering: Numbering = Numbering(),
) -> tuple[ShardSpec, ...]:
    """Split ``files`` into shards of at most ``max_count`` samples and ``max_size`` bytes.

    Samples are shuffled across classes first (seeded, unless ``shuffle`` is off): ImageFolder
    order is sorted by class, and no buffer shuffle at read time can repair class-sorted shards.
    ``infos`` (from the probe) give the bytes each image or video member stores (and a video's
    facts, which its ``KEY.json`` carries). A shard exceeds
    ``max_size`` only when a single sample does.
    """
    if len(infos) != len(files):
        raise ValueError("infos must match files")
    needs = [
        sample_bound(f, info.payload_size, classes, info.video)
        for f, info in zip(files, infos, strict=True)
    ]
    groups = group_samples(needs, options)
    first, start = numbering.first_shard, numbering.first_key
    width = max(9, len(str(max(len(files) - 1 + start, 0))))
    specs = []
    for n, group in enumerate(groups):
        bound = END_OF_ARCHIVE + sum(needs[i] for i in group)
        specs.append(
            ShardSpec(
                index=first + n,
                name=shard_name(prefix, first + n, first + len(groups)),
                samples=tuple(files[i] for i in group),
                infos=tuple(infos[i] for i in group),
                keys=tuple(sample_key(files[i], width, start) for i in group),
                size_bound=bound,
            )
        )
    return tuple(specs)
