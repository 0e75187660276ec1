"""Tar members with fixed metadata, written without the tarfile module.

Every member is a regular file with mode 0444, uid/gid 0, empty owner names and mtime 0, so
packing the same input twice gives byte-identical shards. Headers are plain POSIX ustar (names
are short ASCII keys, checked here, never absolute or with a ``..``: see tar_safety); the
archive ends with two zero blocks and no record padding.
"""

from __future__ import annotations

from collections.abc import Callable

from wdstool.format.tar_safety import printable_name, unsafe_reasons

BLOCK = 512
END = b"\0" * (2 * BLOCK)
_ZEROS = b"\0" * BLOCK


def _template() -> bytearray:
    h = bytearray(BLOCK)
    h[100:108] = b"0000444\0"  # mode
    h[108:116] = b"0000000\0"  # uid
    h[116:124] = b"0000000\0"  # gid
    h[136:148] = b"00000000000\0"  # mtime
    h[156:157] = b"0"  # typeflag: regular file
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    return h


_TEMPLATE = bytes(_template())


def header(name: str, size: int) -> bytes:
    """A 512-byte ustar header for a regular file ``name`` of ``size`` bytes.

    Refuses (ValueError) a name that would be unsafe to extract (absolute, ``..``, not UTF-8):
    pack's keys are sanitised, so reaching this is a bug, and no shard gets such a member.
    """
    reasons = unsafe_reasons(name)
    if reasons:
        raise ValueError(f"refusing tar member '{printable_name(name)}': {', '.join(reasons)}")
    raw = name.encode("ascii")
    if len(raw) > 100 or not raw:
        raise ValueError(f"tar member name must be 1..100 ASCII bytes: {name!r}")
    if size >= 8**11:
        raise ValueError(f"member {name!r} too large for a ustar header: {size} bytes")
    h = bytearray(_TEMPLATE)
    h[0 : len(raw)] = raw
    h[124:136] = b"%011o\0" % size
    h[148:156] = b"        "
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def padding(size: int) -> bytes:
    """Zero bytes that pad a member of ``size`` bytes to a whole block."""
    return _ZEROS[: -size % BLOCK]


def member_bytes(payload: int) -> int:
    """Bytes a member with ``payload`` bytes of data takes: header + data padded to blocks."""
    return BLOCK + -(-payload // BLOCK) * BLOCK


def write_member(write: Callable[[bytes], object], name: str, data: bytes) -> int:
    """Write one member through ``write``; return the bytes written."""
    hdr = header(name, len(data))
    pad = padding(len(data))
    write(hdr)
    write(data)
    if pad:
        write(pad)
    return BLOCK + len(data) + len(pad)
