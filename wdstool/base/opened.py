"""What a store's opener hands :class:`wdstool.base.remote.RangeReader`: a body to read from a
byte offset, the object's size where the store said it, and a validator a resume must match."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Body(Protocol):
    def read(self, n: int = -1) -> bytes: ...
    def close(self) -> None: ...


@dataclass
class Opened:
    body: Body
    size: int | None  # total object size, when the store said
    version: str | None  # ETag or similar; a resumed read must see the same one


# (offset, version, end) -> an open body at offset (up to end, where not None)
Opener = Callable[[int, str | None, int | None], Opened]

__all__ = ["Body", "Opened", "Opener"]
