"""Tars written with Python's tarfile for the tar reader's tests, and a stream that cannot seek."""

from __future__ import annotations

import io
import tarfile

from tests.conftest import jpeg_bytes


def add(tf: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, **kw):
    """One member ``name`` of type ``kind`` (``data`` only for a regular file); ``kw`` sets
    TarInfo's other attributes (``linkname``, ``devmajor``, ``mtime``, ``pax_headers``, ...)."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for k, v in kw.items():
        setattr(info, k, v)
    tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def sample(tf: tarfile.TarFile, key: str, seed: int, label: int = 0) -> None:
    """A sample of two members: ``KEY.jpg`` (a real JPEG) and ``KEY.cls``."""
    add(tf, f"{key}.jpg", jpeg_bytes(seed))
    add(tf, f"{key}.cls", b"%d" % label)


def build_tar(
    samples: list[tuple[str, dict[str, bytes]]], fmt=tarfile.USTAR_FORMAT, extra=None
) -> bytes:
    """A tar in memory: every ``(key, {ext: data})`` as members ``KEY.EXT``; ``extra(tf, key)``
    adds more after each sample."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for key, parts in samples:
            for ext, data in parts.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            if extra:
                extra(tf, key)
    return buf.getvalue()


class Pipe(io.RawIOBase):
    """A non-seekable stream (like an HTTP body)."""

    def __init__(self, data: bytes) -> None:
        self._b = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        return self._b.readinto(b)
