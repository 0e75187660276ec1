"""A piece of a manifest's shard list as byte matrices, one per layout of its entries.

Every entry of a manifest read a piece at a time (:mod:`wdstool.format.manifest_stream`) is its
template's runs (:class:`wdstool.format.manifest_template.Template`) with values between them;
entries whose values have the same widths (a *layout*: most pieces have one or two, names of
one width, counts of as many digits) lie at the same offsets from their first byte. Each layout's
entries become one matrix (rows gathered, or the piece itself reshaped where one layout covers
it), checked against the template's bytes in one comparison and read by column slices: digits
to ints, strings copied out, the text a digest hashes laid side by side. About 10 ms a piece of
8 MB (50,000 entries), where a gather per field and entry took 40.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

WIDTH_BITS = 12  # a value wider than 4,095 bytes: not a layout read here
SLACK = 8  # bytes a row's words may read past its end (the piece is padded; gathered rows too)
_POW10 = 10 ** np.arange(18, dtype=np.int64)[::-1]
_LOW = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


@dataclass
class Layout:
    """Entries of one layout: their rows (indexes into the piece), widths of the values, each
    run's offset in the entry, the entry's length, and its bytes (a matrix)."""

    rows: np.ndarray
    widths: np.ndarray
    offsets: list[int]
    length: int
    matrix: np.ndarray = field(repr=False)  # (rows, length), each row SLACK bytes readable on

    def value(self, j: int, runs: list[bytes]) -> np.ndarray:
        """The bytes of value ``j`` of every entry: a (rows, width) view."""
        a = self.offsets[j] + len(runs[j])
        return self.matrix[:, a : a + int(self.widths[j])]

    def words(self, a: int, k: int) -> np.ndarray:
        """Bytes ``[a, a + 8k)`` of every entry as ``k`` little-endian words: a (rows, k) view
        (no copy)."""
        m = self.matrix
        base = m.base if m.base is not None else m
        start = m.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        return np.ndarray(
            (len(m), k), dtype="<u8", buffer=base, offset=start + a, strides=(m.strides[0], 8)
        )


def layouts(
    buf: np.ndarray, starts: np.ndarray, widths: np.ndarray, runs: list[bytes]
) -> tuple[list[Layout], np.ndarray]:
    """The entries (first byte ``starts`` in ``buf``, values ``widths``) grouped by layout,
    each with its matrix: the piece itself reshaped where one layout holds every entry and they
    lie back to back, else each entry's bytes gathered; and the entries that would run past
    ``buf`` (not the template: what follows the list, read as if it were an entry)."""
    if not len(starts):
        return [], np.zeros(0, np.int64)
    clipped = np.clip(widths, 0, (1 << WIDTH_BITS) - 1).astype(np.int64)
    key = np.zeros(len(starts), dtype=np.int64)
    for j in range(widths.shape[1]):
        key |= clipped[:, j] << (WIDTH_BITS * j)
    kinds, which = np.unique(key, return_inverse=True)
    fixed = sum(len(r) for r in runs)
    out, outside = [], []
    for g in range(len(kinds)):
        rows = np.flatnonzero(which == g) if len(kinds) > 1 else np.arange(len(starts))
        w = clipped[rows[0]]
        offsets = [0]
        for j in range(len(w)):
            offsets.append(offsets[-1] + len(runs[j]) + int(w[j]))
        length = fixed + int(w.sum())
        fits = (starts[rows] >= 0) & (starts[rows] + length + SLACK <= len(buf))
        if not fits.all():
            outside.append(rows[~fits])
            rows = rows[fits]
            if not len(rows):
                continue
        first = int(starts[rows[0]])
        back_to_back = len(rows) == len(starts) and bool((np.diff(starts) == length).all())
        if back_to_back and first + length * len(rows) + SLACK <= len(buf):
            matrix = buf[first : first + length * len(rows)].reshape(len(rows), length)
        else:  # rows of length + SLACK: a word read at a row's end stays in the copy
            wide = length + SLACK
            window = np.lib.stride_tricks.as_strided(
                buf, shape=(len(buf) - wide + 1, wide), strides=(1, 1)
            )
            matrix = window[starts[rows]][:, :length]
        out.append(Layout(rows, w, offsets, length, matrix))
    return out, np.concatenate(outside) if outside else np.zeros(0, np.int64)


def same(layout: Layout, a: int, pattern: bytes) -> np.ndarray:
    """Whether every entry of ``layout`` holds ``pattern`` at offset ``a``: a word at a time."""
    k = -(-len(pattern) // 8)
    words = layout.words(a, k)
    want = np.frombuffer(pattern + bytes(8 * k - len(pattern)), dtype="<u8")
    diff = np.zeros(len(words), dtype=np.uint64)
    for j in range(k):
        w = words[:, j]
        if j == k - 1 and len(pattern) % 8:
            w = w & _LOW[len(pattern) % 8]
        diff |= w ^ want[j]
    return diff == 0


def check(layout: Layout, runs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Per entry of ``layout``: its runs but the last are the template's; and the last too."""
    ok = np.ones(len(layout.rows), dtype=bool)
    for j, run in enumerate(runs[:-1]):
        ok &= same(layout, layout.offsets[j], run)
    return ok, ok & same(layout, layout.offsets[-1], runs[-1])


def digits(cols: np.ndarray) -> np.ndarray | None:
    """The ints written in each row of ``cols`` as ``json.dumps`` writes them (an optional
    ``-``, 1 to 18 digits, no leading zero, no ``-0``); None where one is not."""
    width = cols.shape[1]
    if not width or width > 18:
        return None
    d = cols - np.uint8(48)  # a digit: 0..9; anything else wraps past 9
    neg = cols[:, 0] == 45
    if bool(neg.any()):
        d = d.copy()
        d[neg, 0] = 0
        if width == 1:
            return None
    if not bool((d <= 9).all()):
        return None
    first = d[:, 1] if bool(neg.any()) and width > 1 else d[:, 0]
    lead = np.where(neg, first, d[:, 0])
    if (width > 1 and bool((lead == 0).any())) or bool((neg & (lead == 0)).any()):
        return None
    value = d[:, 0].astype(np.int64)
    for j in range(1, width):
        value = value * 10 + d[:, j]
    return np.where(neg, -value, value)


def printable(cols: np.ndarray) -> bool:
    """Printable ASCII only (a raw control byte is not JSON; non-ASCII is left to the
    ordinary parse)."""
    return not cols.size or bool(((cols - np.uint8(32)) < np.uint8(95)).all())


def in_order(parts: list[tuple[np.ndarray, np.ndarray]], n: int) -> bytes:
    """Rows given by layout (each part: row indexes, a (rows, width) matrix) as one byte
    string, row 0 first."""
    if len(parts) == 1:
        return np.ascontiguousarray(parts[0][1]).tobytes()
    lengths = np.zeros(n, dtype=np.int64)
    for rows, m in parts:
        lengths[rows] = m.shape[1]
    at = np.concatenate(([0], np.cumsum(lengths)))
    out = np.empty(int(at[-1]), dtype=np.uint8)
    for rows, m in parts:
        if m.shape[1]:
            out[(at[rows][:, None] + np.arange(m.shape[1])).ravel()] = m.ravel()
    return out.tobytes()


def lengths_of(parts: list[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    for rows, m in parts:
        out[rows] = m.shape[1]
    return out


def text(pieces: list[Any]) -> np.ndarray:
    """Row by row, ``pieces`` side by side: (rows, width) matrices and literal bytes."""
    n = next(len(p) for p in pieces if isinstance(p, np.ndarray))
    cols = [
        p if isinstance(p, np.ndarray) else np.broadcast_to(np.frombuffer(p, np.uint8), (n, len(p)))
        for p in pieces
    ]
    return np.concatenate(cols, axis=1)


def row_hash(cols: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes and width (to find a name twice)."""
    width = cols.shape[1]
    pad = np.zeros((len(cols), -width % 8), dtype=np.uint8)
    words = np.ascontiguousarray(np.concatenate([cols, pad], axis=1)).view("<u8")
    h = np.full(len(cols), width, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for k in range(words.shape[1]):
        h = (h ^ words[:, k]) * np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
    return h


__all__ = [
    "SLACK",
    "Layout",
    "check",
    "digits",
    "in_order",
    "layouts",
    "lengths_of",
    "printable",
    "row_hash",
    "same",
    "text",
]
