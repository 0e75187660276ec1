"""What a store's opener hands :class:`wdstool.base.remote.RangeReader`: a body to read from a
byte offset, the object's size where the store said it, and a validator a resume must match."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Body(Protocol):
    """A response body. One may also have ``finish()``: it is done with, nothing went wrong
    (a short rest is read out, so that the connection is kept and the server sees no reset);
    ``close()`` is for a body given up on."""

    def read(self, n: int = -1) -> bytes: ...
    def close(self) -> None: ...


@dataclass
class Opened:
    body: Body
    size: int | None  # total object size, when the store said
    version: str | None  # ETag or similar; a resumed read must see the same one
    # the body stops at the ``end`` asked for; False: it runs on (then no request is cut into
    # pieces: each piece would cost a whole new read)
    bounded: bool = True
    # a new request reads the object again from byte 0 (a web server that ignores Range):
    # a forward seek then reads through, never opens again
    rereads: bool = False


# (offset, version, end) -> an open body at offset (up to end, where not None)
Opener = Callable[[int, str | None, int | None], Opened]

__all__ = ["Body", "Opened", "Opener"]
