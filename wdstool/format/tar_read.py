"""A minimal, fast and safe streaming tar reader that groups members into samples.

Python's ``tarfile`` costs ~185 µs per member; parsing the 512-byte headers here costs a few.
Only regular files become sample parts; links, devices, FIFOs and directories are skipped and
never followed. Members whose extension the caller does not keep are skipped without being read
into memory (seek, or read-and-discard on a stream), so e.g. a ``.pkl`` member is never even
loaded. A malformed header, bad checksum, absurd size or truncation raises ShardError naming the
URL and the byte offset. A clean EOF exactly at a block boundary after a complete member counts
as the end of the archive (some writers omit the two zero blocks).

:class:`ObservedTarSampleReader` also shows every member header to a callback (verify checks
names with :mod:`wdstool.format.tar_safety`); the plain reader does no such work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from wdstool.base.errors import ShardError

log = logging.getLogger(__name__)
BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")
_NO_DATA = (b"1", b"2", b"3", b"4", b"6")
_SKIP_CHUNK = 1 << 20


@dataclass(slots=True)
class Sample:
    key: str
    parts: dict[str, bytes]
    offset: int


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """Where one regular-file member lies in a tar: its (first) header and its data."""

    name: str
    offset: int  # the first header of the member (pax / GNU long-name headers included)
    data_offset: int
    size: int


@dataclass(slots=True)
class TarMember:
    """One member as the headers give it: GNU long names and pax ``path``/``size`` applied."""

    name: str  # undecodable bytes as surrogate escapes
    size: int  # 0 for links, devices and FIFOs
    offset: int  # offset of the (first) header of this member
    data_offset: int
    kind: bytes  # the one-byte typeflag: b"0" regular file, b"2" symlink, ...


def _octal(field: bytes, url: str, offset: int) -> int:
    if field and field[0] & 0x80:  # GNU base-256
        value = int.from_bytes(field[1:], "big")
        if field[0] & 0x40:
            raise ShardError(f"{url}: negative size in tar header at offset {offset}")
        return value
    text = field.split(b"\0", 1)[0].strip()
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise ShardError(
            f"{url}: malformed number {text[:12]!r} in tar header at offset {offset}"
        ) from None


def checksum_ok(block: bytes) -> bool:
    """Whether the 512-byte tar header ``block`` carries its own checksum (bytes 148-155, octal:
    the sum of the header's bytes with the checksum field as spaces), summed as unsigned bytes
    or, as old tars did, as signed ones."""
    stored = block[148:156].split(b"\0", 1)[0].strip()
    try:
        want = int(stored, 8)
    except ValueError:
        return False
    unsigned = sum(block[:148]) + 256 + sum(block[156:])
    if unsigned == want:
        return True
    # old tars summed the bytes as signed chars: each byte above 127 counts 256 less
    signed = unsigned - 256 * sum(1 for b in block[:148] + block[156:] if b > 127)
    return signed == want


def header_offsets(data: bytes) -> list[int]:
    """The offsets (multiples of 512 in ``data``) of the blocks that are tar headers: a valid
    checksum, not all zeros. How a reader that lands at an arbitrary block of a shard, inside
    some member's data, finds the members around it without reading the shard from its start
    (image data passes the checksum test by accident with a chance of about 1e-9 per block:
    the field must hold six octal digits that match the block's sum)."""
    return [
        pos
        for pos in range(0, len(data) - BLOCK + 1, BLOCK)
        if data[pos : pos + BLOCK].count(0) != BLOCK and checksum_ok(data[pos : pos + BLOCK])
    ]


def split_key(name: str) -> tuple[str, str] | None:
    """(key, extension) as members are grouped into samples: ("dir/abc", "jpg") for
    "dir/abc.JPG"; None for names without an extension."""
    slash = name.rfind("/")
    base = name[slash + 1 :]
    dot = base.find(".")
    if dot <= 0:
        return None
    return name[: slash + 1 + dot], base[dot + 1 :].lower()


def _pax_records(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        sp = data.find(b" ", pos)
        if sp < 0:
            break
        try:
            length = int(data[pos:sp])
        except ValueError:
            break
        if length <= 0:
            break
        record = data[sp + 1 : pos + length - 1]
        key, _, value = record.partition(b"=")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


class TarSampleReader:
    """Iterate the samples of one tar stream: consecutive members sharing a key form a sample."""

    def __init__(
        self,
        fileobj: BinaryIO,
        url: str,
        *,
        start_offset: int = 0,
        max_member_size: int = 1 << 30,
        keep: Callable[[str], bool] | None = None,
        lazy: Callable[[int, int], Any] | None = None,
        lazy_exts: frozenset[str] = frozenset(),
    ) -> None:
        """``keep(ext)`` says which members to read (the others are skipped unread); for kept
        members whose extension is in ``lazy_exts``, ``lazy(data offset, size)`` stands in for
        the bytes (e.g. a view into a memory-mapped shard, read when needed) and the data is
        seeked past, not read."""
        self._lazy = lazy
        self._lazy_exts = lazy_exts if lazy is not None else frozenset()
        self._f = fileobj
        self.url = url
        self._pos = start_offset  # absolute position of the next unread byte
        self._max = max_member_size
        self._keep = keep
        self._seekable = bool(getattr(fileobj, "seekable", lambda: False)())
        # absolute offset of the file's byte 0 (``start_offset`` may count from elsewhere)
        self._base = start_offset - fileobj.tell() if self._seekable else 0
        self._offset = start_offset

    @property
    def offset(self) -> int:
        """Absolute offset just past the last complete sample yielded or skipped."""
        return self._offset

    # --- low level -----------------------------------------------------------------------
    def _read_exact(self, n: int, what: str, at: int) -> bytes:
        data = self._f.read(n)
        if len(data) != n:
            chunks = [data]
            got = len(data)
            while got < n:
                more = self._f.read(n - got)
                if not more:
                    raise ShardError(f"{self.url}: truncated {what} at offset {at}")
                chunks.append(more)
                got += len(more)
            data = b"".join(chunks)
        self._pos += n
        return data

    def _discard(self, n: int, at: int) -> None:
        if n <= 0:
            return
        if self._seekable:
            self._f.seek(n, 1)
            self._pos += n
            return
        while n > 0:
            chunk = self._f.read(min(n, _SKIP_CHUNK))
            if not chunk:
                raise ShardError(f"{self.url}: truncated member data at offset {at}")
            n -= len(chunk)
            self._pos += len(chunk)

    def _check_end(self, at: int) -> None:
        """A seek past the end of a file succeeds, so skipped data may not have been there:
        at the end, a seekable file must reach the offset the headers led to."""
        if not self._seekable:
            return
        end = self._f.seek(0, 2) + self._base
        if end < at:
            raise ShardError(
                f"{self.url}: truncated member data: the shard ends at offset {end}, "
                f"before offset {at}"
            )

    def _next_member(self) -> TarMember | None:
        """Parse headers up to the next member (extensions resolved); None at end of archive."""
        long_name: str | None = None
        pax: dict[str, str] = {}
        first: int | None = None
        while True:
            at = self._pos
            block = self._f.read(BLOCK)
            if len(block) < BLOCK:
                if not block and long_name is None and not pax:
                    self._check_end(at)
                    return None  # clean EOF at a block boundary
                raise ShardError(f"{self.url}: truncated tar header at offset {at}")
            self._pos += BLOCK
            if block.count(0) == BLOCK:
                return None
            if not checksum_ok(block):
                raise ShardError(f"{self.url}: bad tar header checksum at offset {at}")
            first = at if first is None else first
            size = _octal(block[124:136], self.url, at)
            kind = block[156:157]
            if kind in (b"x", b"g", b"L", b"K"):  # K: a GNU long link name, not a member
                if size > 1 << 20:
                    raise ShardError(
                        f"{self.url}: oversized extended header ({size} bytes) at offset {at}"
                    )
                data = self._read_exact(size, "extended header", at)
                self._discard(-size % BLOCK, at)
                if kind == b"L":
                    long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                elif kind == b"x":
                    pax.update(_pax_records(data))
                continue
            if "size" in pax:
                try:
                    size = int(pax["size"])
                except ValueError:
                    raise ShardError(f"{self.url}: bad pax size at offset {at}") from None
            if size > self._max or size < 0:
                raise ShardError(
                    f"{self.url}: member at offset {at} declares {size} bytes (limit {self._max})"
                )
            if "path" in pax:
                name = pax["path"]
            elif long_name is not None:
                name = long_name
            else:
                raw = block[0:100].split(b"\0", 1)[0]
                if block[257:262] == b"ustar":
                    prefix = block[345:500].split(b"\0", 1)[0]
                    if prefix:
                        raw = prefix + b"/" + raw
                name = raw.decode("utf-8", "surrogateescape")
            if kind in _NO_DATA:
                size = 0  # links, devices and FIFOs carry no data, whatever the header claims
            return TarMember(name, size, first, self._pos, kind)

    def members(self) -> Iterator[MemberInfo]:
        """Every regular-file member in archive order, from the headers alone: the data of
        every member is seeked past (read and discarded on a stream), never kept. Links,
        devices, FIFOs and directories are left out. Do not mix with iterating samples."""
        while (m := self._next_member()) is not None:
            self._discard(m.size + (-m.size % BLOCK), m.offset)
            if m.kind in _REGULAR:
                yield MemberInfo(
                    name=m.name, offset=m.offset, data_offset=m.data_offset, size=m.size
                )

    # --- samples -------------------------------------------------------------------------
    def _samples(self) -> Iterator[Sample]:
        current: Sample | None = None
        while True:
            m = self._next_member()
            if m is None:
                break
            split = split_key(m.name) if m.kind in _REGULAR else None
            if split is None:  # no extension, or a hidden file (".x.jpg": no key either)
                self._discard(m.size + (-m.size % BLOCK), m.offset)
                continue
            key, ext = split
            if current is not None and key != current.key:
                # yield before touching this member's data: skip() may change ``keep`` meanwhile
                self._offset = m.offset
                yield current
                current = None
            if current is None:
                current = Sample(key, {}, m.offset)
            if self._keep is None or self._keep(ext):
                if ext in self._lazy_exts:
                    data = self._lazy(self._pos, m.size)  # type: ignore[misc]
                    self._discard(m.size + (-m.size % BLOCK), m.offset)
                else:
                    data = self._read_exact(m.size, "member data", m.offset)
                    self._discard(-m.size % BLOCK, m.offset)
                if ext in current.parts:
                    log.debug("%s: duplicate member %s.%s, keeping the last", self.url, key, ext)
                current.parts[ext] = data
            else:
                self._discard(m.size + (-m.size % BLOCK), m.offset)
        if current is not None:
            self._offset = self._pos
            yield current

    def __iter__(self) -> Iterator[Sample]:
        if not hasattr(self, "_gen"):
            self._gen = self._samples()
        return self._gen

    def skip(self, n: int) -> None:
        """Advance past ``n`` samples reading headers only (data of every member is skipped)."""
        if n <= 0:
            return
        keep = self._keep
        self._keep = lambda ext: False
        try:
            it = iter(self)
            for i in range(n):
                try:
                    next(it)
                except StopIteration:
                    raise ShardError(f"{self.url}: has only {i} samples, cannot skip {n}") from None
        finally:
            self._keep = keep


class ObservedTarSampleReader(TarSampleReader):
    """A :class:`TarSampleReader` that passes every member to ``on_member`` as its header is
    parsed, before its data is read or skipped: links, devices, FIFOs, folders and members that
    belong to no sample included (extension headers are not members, they shape the next one).

    A separate class, so the loaders' reader does no extra work per member.
    """

    def __init__(
        self,
        fileobj: BinaryIO,
        url: str,
        *,
        on_member: Callable[[TarMember], object],
        **kwargs,
    ) -> None:
        super().__init__(fileobj, url, **kwargs)
        self._on_member = on_member

    def _next_member(self) -> TarMember | None:
        member = super()._next_member()
        if member is not None:
            self._on_member(member)
        return member
