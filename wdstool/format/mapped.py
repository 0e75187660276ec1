"""Member bytes read out of a memory-mapped local shard, when they are needed.

The loaders hold samples in a shuffle buffer (up to ``shuffle_buffer`` compressed samples per
worker) before decoding them. Read with ``read()``, those bytes are copies in the process's
private memory (~216 MB per worker here). From a local shard (or a complete cache entry) the
image member is instead a :class:`MappedMember` -- where the bytes lie in a read-only mapping --
and its bytes are copied out only when the sample is decoded, after which their pages are
dropped from the process again (the page cache keeps them). The copy is guarded: a shard
truncated or rewritten under the mapping (which makes a read fault with SIGBUS) becomes a
one-line ShardError naming the shard (``wdstool/format/_mapread.c``).

``WDSTOOL_MMAP=0`` switches it off; without the compiled part it is off.
"""

from __future__ import annotations

import mmap
import os
from typing import BinaryIO

from wdstool.base.errors import ShardError

try:
    from wdstool.format import _mapread
except ImportError:  # built without a C compiler: members are read with read()
    _mapread = None

MMAP = _mapread is not None and os.environ.get("WDSTOOL_MMAP", "1") != "0"


class MappedMember:
    """``size`` bytes at ``offset`` of the mapping of shard ``url``; ``bytes_()`` reads them."""

    __slots__ = ("mapping", "offset", "size", "url")

    def __init__(self, mapping: mmap.mmap, offset: int, size: int, url: str) -> None:
        self.mapping, self.offset, self.size, self.url = mapping, offset, size, url

    def __len__(self) -> int:
        return self.size

    def bytes_(self) -> bytearray:
        """The member's bytes (a fresh bytearray), its pages dropped from this process after."""
        try:
            return _mapread.copy(self.mapping, self.offset, self.size, True)  # type: ignore[union-attr]
        except (OSError, ValueError) as exc:
            raise ShardError(
                f"{self.url}: the shard changed while it was being read (truncated or rewritten "
                f"under its memory mapping, member at byte {self.offset}): {exc}"
            ) from None


def map_shard(f: BinaryIO, url: str) -> mmap.mmap | None:
    """A read-only mapping of the open local file ``f``, or None (off, empty, not a file)."""
    if not MMAP:
        return None
    try:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, AttributeError):  # empty file, a pipe, no fileno
        return None


def materialized(data: bytes | bytearray | MappedMember) -> bytes | bytearray:
    """The bytes of a member, read out of its mapping where it is a :class:`MappedMember`."""
    return data.bytes_() if isinstance(data, MappedMember) else data
