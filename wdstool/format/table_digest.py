"""What a manifest's digests hash, made from a shard table's arrays instead of an object per shard.

Two digests cover a manifest's shards: the identity of a data set without a fingerprint (the
loader's ``sha256("\\n".join(f"{url}\\0{nsamples}\\0{sha256}"))``) and the digest an offsets
file names (``wdstool.format.sample_offsets.shards_digest``: ``f"{url}\\0{nsamples}\\0
{filesize}\\0{sha256}\\n"`` per shard). A table streamed out of a large manifest
(``wdstool.format.manifest_stream``) has those fields as arrays; here the same text is laid out
row by row in a byte matrix, a block of rows at a time (each field right-aligned in columns of
its widest value, the padding masked out), so the digests equal those of the manifest's objects
byte for byte: 1,000,000 shards in ~0.2 s, where a Python loop over them takes ~1 s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np

from wdstool.format.shard_table import ShardTable

ROWS = 1 << 16  # rows laid out at a time (a block of ~8 MB for rows of ~125 bytes)
_DIGITS = 20  # a sign and 19 digits: any int64


def _ints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decimal text of int64 ``values`` as ``str(int)`` writes it: a (rows, 20) byte matrix,
    right-aligned, and the mask of the bytes that are text."""
    v = np.asarray(values, dtype=np.int64)
    neg = v < 0
    a = np.abs(v).astype(np.uint64)
    out = np.empty((len(v), _DIGITS), dtype=np.uint8)
    for k in range(_DIGITS - 1, 0, -1):
        out[:, k] = (a % 10).astype(np.uint8) + 48
        a //= 10
    width = (_DIGITS - 1) - _first_nonzero(out[:, 1:])  # digits of each value ("0": one)
    out[:, 0] = 45  # "-"
    cols = np.arange(_DIGITS)
    mask = cols >= _DIGITS - width[:, None]
    mask[:, 0] = neg
    return out, mask


def _first_nonzero(digits: np.ndarray) -> np.ndarray:
    """Index of each row's first digit other than "0" (the last column where all are "0")."""
    nz = digits != 48
    nz[:, -1] = True
    return nz.argmax(axis=1)


def _texts(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte strings ``buf[starts[i]:ends[i]]`` as a (rows, widest) matrix and its mask."""
    lengths = ends - starts
    width = int(lengths.max()) if len(lengths) else 0
    cols = np.arange(width)
    mask = cols < lengths[:, None]
    at = np.minimum(starts[:, None] + cols, max(len(buf) - 1, 0))
    return (buf[at] if len(buf) else np.zeros(mask.shape, np.uint8)), mask


def _const(rows: int, text: bytes) -> tuple[np.ndarray, np.ndarray]:
    m = np.frombuffer(text, dtype=np.uint8)
    return np.broadcast_to(m, (rows, len(m))), np.ones((rows, len(m)), dtype=bool)


def _sha_texts(sha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    width = sha.dtype.itemsize
    raw = np.ascontiguousarray(sha).view(np.uint8).reshape(len(sha), width)
    return raw, raw != 0  # an "S" array pads with NUL bytes; checksums hold none


def _rows(table: ShardTable, fields: tuple[str, ...]) -> Iterator[bytes]:
    """The text of ``fields`` (``url``, ``nsamples``, ``filesize``, ``sha256`` or a literal
    separator ``b"..."``) row after row, a block of ROWS rows at a time."""
    names = np.asarray(table.names)
    ends = np.asarray(table.name_ends, dtype=np.int64)
    for lo in range(0, len(table), ROWS):
        hi = min(len(table), lo + ROWS)
        starts = np.concatenate(([ends[lo - 1] if lo else 0], ends[lo : hi - 1]))
        parts = []
        for f in fields:
            if isinstance(f, bytes):
                parts.append(_const(hi - lo, f))
            elif f == "url":
                parts.append(_texts(names, starts, ends[lo:hi]))
            elif f == "sha256":
                parts.append(_sha_texts(np.asarray(table.sha256[lo:hi])))
            else:
                parts.append(_ints(np.asarray(getattr(table, f)[lo:hi])))
        matrix = np.concatenate([p[0] for p in parts], axis=1)
        mask = np.concatenate([p[1] for p in parts], axis=1)
        yield matrix[mask].tobytes()


def identity_digest(table: ShardTable) -> str:
    """The identity the loader gives a manifest without a fingerprint, from its table."""
    h = hashlib.sha256()
    first = True
    for block in _rows(table, (b"\n", "url", b"\0", "nsamples", b"\0", "sha256")):
        h.update(block[1:] if first else block)  # "\n".join: no separator before the first
        first = False
    return h.hexdigest()


def offsets_digest(table: ShardTable) -> str:
    """``shards_digest`` of the manifest a table was made from."""
    h = hashlib.sha256()
    fields = ("url", b"\0", "nsamples", b"\0", "filesize", b"\0", "sha256", b"\n")
    for block in _rows(table, fields):
        h.update(block)
    return h.hexdigest()[:32]


__all__ = ["identity_digest", "offsets_digest"]
