"""In-memory files for tests of the tar reader: one that counts the bytes it hands out."""

from __future__ import annotations

import io


class CountingReader(io.RawIOBase):
    """A seekable file that counts the bytes actually read (seeks are free)."""

    def __init__(self, data: bytes) -> None:
        self._b = io.BytesIO(data)
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._b.readinto(b)
        self.bytes_read += n
        return n

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._b.seek(pos, whence)

    def tell(self) -> int:
        return self._b.tell()
