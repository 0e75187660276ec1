"""Where a tar's samples lie, from its headers alone, and a check that a header still says so.

``reshard`` plans its output from these positions before it copies a byte: each sample is its
key and its members (name, data offset, size) in archive order, grouped exactly as
:class:`wdstool.format.tar_read.TarSampleReader` groups them (consecutive regular members sharing
a key; members without an extension, hidden names, links, devices and folders belong to no
sample and are left out without ending the sample around them). Member data is never read here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from wdstool.base.errors import ShardError, StorageError, WdsToolError
from wdstool.format.tar_read import (
    BLOCK,
    MemberInfo,
    TarSampleReader,
    checksum_ok,
    split_key,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SampleSpan:
    """One sample of a tar: its key and members in archive order. Its bytes are
    ``[start, end)``: from its first member's first header to its last member's padded data
    (members that belong to no sample may lie in between)."""

    key: str
    members: tuple[MemberInfo, ...]

    @property
    def start(self) -> int:
        return self.members[0].offset

    @property
    def end(self) -> int:
        last = self.members[-1]
        return last.data_offset + last.size + (-last.size % BLOCK)


def sample_spans(fileobj: BinaryIO, url: str) -> Iterator[SampleSpan]:
    """The samples of a tar stream, header-only (data is seeked past, or read and discarded on
    a stream). A damaged header raises ShardError naming the URL and offset; the sample being
    read then is not yielded (its members may go on past the damage)."""
    key: str | None = None
    members: list[MemberInfo] = []
    for m in TarSampleReader(fileobj, url).members():
        split = split_key(m.name)
        if split is None:  # no extension, or a dot file
            continue
        if split[0] != key:
            if members:
                yield SampleSpan(key, tuple(members))  # type: ignore[arg-type]
            key, members = split[0], []
        members.append(m)
    if members:
        yield SampleSpan(key, tuple(members))  # type: ignore[arg-type]


@dataclass(frozen=True)
class ShardScan:
    """One shard as its headers say: its samples' offsets (each sample's first header), its size
    (the file's, or where the readable samples end), and what was wrong with it, if anything."""

    url: str
    nsamples: int
    filesize: int
    offsets: tuple[int, ...] | None = None  # None: a format whose readers cannot start inside
    damage: str = ""


def scan_shard(f: BinaryIO, url: str, *, skip_damaged: bool = False) -> ShardScan:
    """The samples of one tar shard, from its headers (member data skipped). A shard cut short
    or corrupt is a ShardError naming it; with ``skip_damaged`` the samples before the damage
    are counted and it is logged."""
    reader = TarSampleReader(f, url, keep=lambda ext: False)
    offsets: list[int] = []
    try:
        offsets.extend(s.offset for s in reader)
    except (ShardError, StorageError, OSError) as exc:
        if not skip_damaged:
            raise
        why = exc.message if isinstance(exc, WdsToolError) else f"{url}: {exc}"
        log.warning(
            "damaged shard: %s; counting the %d samples before byte %d",
            why,
            len(offsets),
            reader.offset,
        )
        return ShardScan(url, len(offsets), reader.offset, tuple(offsets), why)
    size = getattr(getattr(f, "raw", f), "size", None)
    filesize = size if isinstance(size, int) else reader.offset
    return ShardScan(url, len(offsets), filesize, tuple(offsets))


def suffix_of(key: str, name: str) -> str:
    """What follows the key in a member name: ``".jpg"``, ``".seg.png"`` (case kept)."""
    return name[len(key) :]


def header_says(block: bytes, size: int) -> bool:
    """Is ``block`` (the 512 bytes just before a member's data) a valid tar header for a member
    of ``size`` bytes? A cheap check that a shard has not changed since its headers were read."""
    if len(block) != BLOCK or not checksum_ok(block):
        return False
    field = block[124:136]
    if field[0] & 0x80:  # GNU base-256
        return int.from_bytes(field[1:], "big") == size
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text or b"0", 8) == size or size >= 8**11  # a pax size wins past 8 GiB
    except ValueError:
        return False
