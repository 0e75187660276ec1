"""Restart markers in JPEGs: added losslessly at pack time, found by the region decoder.

A JPEG whose entropy-coded data is cut into restart intervals that never straddle an MCU row
lets a decoder that wants one rectangle read only the intervals covering it
(``wdstool/format/_jpegcrop.c``) instead of every row above it and every column of the rows it
keeps: the cost that kept the region decode of large images near 1.4x a whole decode.
``add_restarts`` rewrites a JPEG that way without changing a coefficient
(``wdstool/format/_jpegtran.c``: libjpeg's coefficient API, optimized Huffman tables, one
baseline scan, APPn/COM markers kept, the result read back and compared); ``restart_layout``
reads what a file has from its header.
"""

from __future__ import annotations

from typing import NamedTuple

from wdstool.format.images import jpeg_segments, kind

try:
    from wdstool.format import _jpegtran
except ImportError:  # built without a C compiler or libjpeg headers
    _jpegtran = None

# An interval's width in pixels that the transcode aims for (k = the divisor of a row's MCUs
# nearest it). Measured on 1.5-5 MP photos (bench/restart_bench.py): 32 and 64 px decode a
# RandomResizedCrop box about as fast; 64 px costs half the markers' bytes.
TARGET_WIDTH = 64
# Below this many pixels the region decode gains nothing (450x380 images: 0.9-1.0x in the
# prototype; a whole decode of a marked file is ~5% slower): such images keep their bytes.
MIN_PIXELS = 1_000_000


def available() -> bool:
    """Whether this build can add restart markers (the C extension was compiled)."""
    return _jpegtran is not None


class Rewritten(NamedTuple):
    """``data``: the bytes to store; ``kept``: "" when restart markers were added, else why
    the original bytes were kept."""

    data: bytes
    kept: str


def add_restarts(
    data: bytes,
    size: tuple[int, int],
    *,
    target_width: int = TARGET_WIDTH,
    min_pixels: int = MIN_PIXELS,
) -> Rewritten:
    """``data`` (an image of ``size`` = (width, height)) with restart intervals of about
    ``target_width`` pixels, each MCU row holding whole intervals, decoding to exactly the same
    pixels, never more bytes than ``data``; or the original bytes and the reason they are
    kept: not a JPEG, smaller than ``min_pixels``, already cut into usable intervals,
    arithmetic coding, CMYK, corrupt data, a failed read-back check, larger when rewritten
    (progressive files can be), or this build has no transcoder."""
    if kind(data) != "jpeg":
        return Rewritten(data, "not a JPEG")
    if size[0] * size[1] < min_pixels:
        return Rewritten(data, f"under {min_pixels:,} pixels")
    if _jpegtran is None:
        return Rewritten(data, "built without the JPEG transcoder (C extension)")
    if restart_layout(data) is not None:
        return Rewritten(data, "already has restart intervals")
    try:
        new, why = _jpegtran.restart(data, target_width)
    except ValueError as exc:
        return Rewritten(data, f"unreadable by libjpeg: {exc}")
    if new is None:
        return Rewritten(data, why)
    if len(new) > len(data):  # a writer may plan shards with the original's size as a bound
        return Rewritten(data, "larger when rewritten")
    return Rewritten(new, "")


class RestartLayout(NamedTuple):
    """A JPEG's restart intervals as the region decoder uses them: ``interval`` MCUs each,
    ``per_row`` MCUs in a row of ``mcu`` = (width, height) pixels."""

    interval: int
    per_row: int
    mcu: tuple[int, int]

    @property
    def columns(self) -> bool:
        """Whether rows split into intervals (the decoder can skip columns as well as rows)."""
        return self.per_row % self.interval == 0


def restart_layout(data: bytes) -> RestartLayout | None:
    """The restart intervals of a baseline (or extended sequential) JPEG with one interleaved
    scan, if each row holds whole intervals or each interval whole rows; None otherwise (no
    intervals, progressive, several scans, unusable sizes)."""
    if kind(data) != "jpeg":
        return None
    interval, frame = 0, None
    for code, pos in jpeg_segments(data):  # the walk jpeg_size uses
        at, length = pos + 4, int.from_bytes(data[pos + 2 : pos + 4], "big") - 2
        if code == 0xDD and length >= 2:
            interval = int.from_bytes(data[at : at + 2], "big")
        elif code in (0xC0, 0xC1) and length >= 6:
            frame = at
        elif code == 0xDA:
            if not interval or frame is None or length < 1:
                return None
            comps = data[frame + 5]
            if data[at] != comps or length < 4 + 2 * comps:
                return None  # a scan of fewer components: several scans
            height = int.from_bytes(data[frame + 1 : frame + 3], "big")
            width = int.from_bytes(data[frame + 3 : frame + 5], "big")
            factors = [data[frame + 7 + 3 * c] for c in range(comps)]
            h = max(f >> 4 for f in factors) if comps > 1 else 1
            v = max(f & 15 for f in factors) if comps > 1 else 1
            mcu = (8 * h, 8 * v)
            per_row = -(-width // mcu[0])
            if not height or not per_row:
                return None
            if per_row % interval and interval % per_row:
                return None
            return RestartLayout(interval, per_row, mcu)
        elif 0xC2 <= code <= 0xCF and code not in (0xC4, 0xC8, 0xCC):
            return None  # progressive, lossless, arithmetic: not the region decoder's
    return None
