"""Tar members with fixed metadata, written without the tarfile module.

Every member is a regular file with mode 0444, uid/gid 0, empty owner names and mtime 0, so
packing the same input twice gives byte-identical shards. Headers are plain POSIX ustar (pack's
names are short ASCII keys); a longer or non-ASCII name (a key reshard carries from another
tool's shards) gets a pax ``path`` record before its header, as tar, tarfile and our reader
expect. Names are checked here, never absolute or with a ``..`` (see tar_safety); the archive
ends with two zero blocks and no record padding.
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


def _pax_record(key: str, value: str) -> bytes:
    """One pax record, ``"<length> key=value\n"``, its length counting its own digits."""
    body = f" {key}={value}\n".encode()
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n += 1
    return str(n).encode() + body


def _pax_header(name: str) -> bytes:
    """A pax extended header (``x``) naming ``name``, padded, for the ustar header after it."""
    records = _pax_record("path", name)
    h = bytearray(_TEMPLATE)
    h[0:14] = b"././@PaxHeader"
    h[124:136] = b"%011o\0" % len(records)
    h[156:157] = b"x"
    h[148:156] = b"        "
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h) + records + padding(len(records))


def _needs_pax(name: str) -> bool:
    return not name.isascii() or not 0 < len(name) <= 100


def member_header(name: str, size: int) -> bytes:
    """The header block(s) of a member: :func:`header`, preceded by a pax ``path`` record when
    ``name`` is not 1..100 ASCII bytes (the ustar name field then holds an ASCII stand-in)."""
    if not _needs_pax(name):
        return header(name, size)  # which refuses an unsafe name
    reasons = unsafe_reasons(name)
    if reasons:
        raise ValueError(f"refusing tar member '{printable_name(name)}': {', '.join(reasons)}")
    stand_in = name.encode("ascii", "replace").decode("ascii")[-100:].replace("/", "_")
    return _pax_header(name) + header(stand_in.lstrip(".") or "_", size)


def member_size(name: str, payload: int) -> int:
    """Bytes a member named ``name`` with ``payload`` bytes of data takes in a shard."""
    extra = len(_pax_header(name)) if _needs_pax(name) else 0
    return extra + member_bytes(payload)


def padding(size: int) -> bytes:
    """Zero bytes that pad a member of ``size`` bytes to a whole block."""
    return _ZEROS[: -size % BLOCK]


def member_bytes(payload: int) -> int:
    """Bytes a member with ``payload`` bytes of data takes: header + data padded to blocks."""
    return BLOCK + -(-payload // BLOCK) * BLOCK


def write_member(write: Callable[[bytes], object], name: str, data: bytes) -> int:
    """Write one member through ``write``; return the bytes written."""
    hdr = member_header(name, len(data))
    pad = padding(len(data))
    write(hdr)
    write(data)
    if pad:
        write(pad)
    return len(hdr) + len(data) + len(pad)
