"""Check (and optionally re-encode) one source image before it goes into a shard.

By default an image is not decoded: its header is parsed (format, width, height), its end marker
checked (JPEG EOI, PNG IEND) to catch the common truncated download, and its original bytes are
copied. ``verify_decode`` decodes it fully. ``max_side``/``quality`` re-encode it as JPEG.
The member extension comes from the bytes, never from the file name.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

# PIL format name -> tar member extension
FORMAT_EXT = {
    "JPEG": "jpg",
    "MPO": "jpg",  # multi-picture JPEG from cameras: plain JPEG data first
    "PNG": "png",
    "WEBP": "webp",
    "BMP": "bmp",
    "PPM": "ppm",
    "TIFF": "tiff",
    "GIF": "gif",
}
MAX_PIXELS = 89_478_485  # PIL's own decompression-bomb limit


class BadImage(Exception):
    """This input cannot go into a shard; the message is the reason shown to the user."""


@dataclass(frozen=True, slots=True)
class PreparedImage:
    payload: bytes
    ext: str
    width: int
    height: int
    fmt: str


def _jpeg_segments(data: bytes) -> Iterator[tuple[int, int]]:
    """(marker, offset) of each JPEG segment up to the first scan (SOS), walking by length so
    that nothing inside a segment (an EXIF thumbnail and its markers) is mistaken for one.
    Stops early where the structure is broken."""
    pos, n = 2, len(data)
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        yield marker, pos
        if marker in (0xD9, 0xDA):
            return
        if marker in (0x01, *range(0xD0, 0xD8)):
            pos += 2
            continue
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")


def jpeg_scan_offset(data: bytes) -> int:
    """Offset of the main image's first SOS marker (2 if not found)."""
    return next((pos for marker, pos in _jpeg_segments(data) if marker == 0xDA), 2)


_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header; None if no frame header precedes the scan."""
    for marker, pos in _jpeg_segments(data):
        if marker in _SOF and pos + 9 <= len(data):
            height = int.from_bytes(data[pos + 5 : pos + 7], "big")
            width = int.from_bytes(data[pos + 7 : pos + 9], "big")
            return width, height
    return None


def _fast_header(data: bytes) -> tuple[str, int, int] | None:
    """(format, width, height) for well-formed JPEG and PNG headers without PIL (~50x faster);
    None sends the bytes to PIL, which gives the precise error for anything unusual."""
    if data[:3] == b"\xff\xd8\xff":
        size = jpeg_size(data)
        if size is not None and size[0] > 0 and size[1] > 0:
            return "JPEG", size[0], size[1]
        return None
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 33:
        return "PNG", int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return None


def _check_end(data: bytes, fmt: str) -> None:
    if fmt in ("JPEG", "MPO") and data.rfind(b"\xff\xd9", jpeg_scan_offset(data)) == -1:
        raise BadImage("truncated JPEG: no end-of-image marker")
    if fmt == "PNG" and data.rfind(b"IEND", 8) == -1:
        raise BadImage("truncated PNG: no IEND chunk")


def prepare_image(
    data: bytes,
    *,
    verify_decode: bool = False,
    max_side: int | None = None,
    quality: int | None = None,
) -> PreparedImage:
    """Validate ``data`` and return the bytes to store; raise BadImage with the reason."""
    if not data:
        raise BadImage("empty file")
    fast = (
        None
        if (verify_decode or max_side is not None or quality is not None)
        else _fast_header(data)
    )
    if fast is not None:
        fmt, width, height = fast
        if width * height > MAX_PIXELS:
            raise BadImage(f"image too large: {width}x{height} pixels (limit {MAX_PIXELS})")
        _check_end(data, fmt)
        return PreparedImage(data, FORMAT_EXT[fmt], width, height, fmt)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            fmt = img.format or ""
            width, height = img.size
    except UnidentifiedImageError:
        raise BadImage("not an image (unrecognised format)") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise BadImage("image too large: decompression-bomb guard") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise BadImage(f"unreadable image header: {exc}") from None
    if fmt not in FORMAT_EXT:
        raise BadImage(f"unsupported image format {fmt or 'unknown'}")
    if width < 1 or height < 1:
        raise BadImage(f"invalid image size {width}x{height}")
    if width * height > MAX_PIXELS:
        raise BadImage(f"image too large: {width}x{height} pixels (limit {MAX_PIXELS})")
    _check_end(data, fmt)

    resize = max_side is not None and max(width, height) > max_side
    if not (verify_decode or resize or quality is not None):
        return PreparedImage(data, FORMAT_EXT[fmt], width, height, fmt)
    try:
        img.load()
    except (OSError, SyntaxError, ValueError) as exc:
        raise BadImage(f"corrupt image data: {exc}") from None
    if not (resize or quality is not None):
        return PreparedImage(data, FORMAT_EXT[fmt], width, height, fmt)

    img = img.convert("RGB")
    if resize:
        assert max_side is not None
        scale = max_side / max(width, height)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        img = img.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90 if quality is None else quality, optimize=False)
    return PreparedImage(out.getvalue(), "jpg", img.width, img.height, "JPEG")
