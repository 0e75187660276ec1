"""Image members: which extensions are images, and what their headers say, without decoding.

Both sides read images through here: ``pack`` checks a source image's header and end marker
before it goes into a shard, the loaders draw a crop from a JPEG's frame header before decoding
only that crop, and ``verify`` judges members by the same extensions. Pure byte parsing (no
PIL, no torch): pixel decoding lives in :mod:`wdstool.format.decode`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

# member extensions that hold an image, in the order a sample's image is chosen among them
IMAGE_ORDER = ("jpg", "jpeg", "png", "webp", "bmp", "ppm", "pgm", "tif", "tiff", "gif")
IMAGE_EXTENSIONS: frozenset[str] = frozenset(IMAGE_ORDER)
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


def kind(data: bytes) -> str:
    """ "jpeg", "png", "webp", "gif" or "other", from the leading bytes (never the name)."""
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:4] in (b"GIF8",):
        return "gif"
    return "other"


def is_jpeg(data: bytes) -> bool:
    return data[:3] == b"\xff\xd8\xff"


def jpeg_segments(data: bytes) -> Iterator[tuple[int, int]]:
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
    return next((pos for marker, pos in jpeg_segments(data) if marker == 0xDA), 2)


_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header; None if no frame header precedes the scan."""
    for marker, pos in jpeg_segments(data):
        if marker in _SOF and pos + 9 <= len(data):
            height = int.from_bytes(data[pos + 5 : pos + 7], "big")
            width = int.from_bytes(data[pos + 7 : pos + 9], "big")
            return width, height
    return None


@dataclass(frozen=True, slots=True)
class JpegFrame:
    """What a JPEG's frame header (SOF) says: size, colour components, chroma subsampling."""

    width: int
    height: int
    components: int  # 1 grey, 3 YCbCr (or RGB), 4 CMYK/YCCK
    subsampling: str  # "4:2:0", "4:2:2", "4:4:4", "4:4:0", "4:1:1", "grey", "cmyk", "other"
    progressive: bool


# luma (H, V) sampling factors, chroma at 1x1 -> the J:a:b name
_SUBSAMPLING = {(1, 1): "4:4:4", (2, 1): "4:2:2", (2, 2): "4:2:0", (1, 2): "4:4:0", (4, 1): "4:1:1"}


def jpeg_frame(data: bytes) -> JpegFrame | None:
    """The frame header of a JPEG (only its first bytes are needed: the header segments up to
    SOF); None when no complete frame header lies in ``data``."""
    for marker, pos in jpeg_segments(data):
        if marker not in _SOF:
            continue
        ncomp = data[pos + 9] if pos + 10 <= len(data) else 0
        if ncomp == 0 or pos + 10 + 3 * ncomp > len(data):
            return None
        factors = [(b >> 4, b & 15) for b in data[pos + 11 : pos + 10 + 3 * ncomp : 3]]
        if ncomp == 1:
            sub = "grey"
        elif ncomp == 4:
            sub = "cmyk"
        elif ncomp == 3 and all(f == (1, 1) for f in factors[1:]):
            sub = _SUBSAMPLING.get(factors[0], "other")
        else:
            sub = "other"
        return JpegFrame(
            width=int.from_bytes(data[pos + 7 : pos + 9], "big"),
            height=int.from_bytes(data[pos + 5 : pos + 7], "big"),
            components=ncomp,
            subsampling=sub,
            progressive=marker in (0xC2, 0xC6, 0xCA, 0xCE),
        )
    return None


def fast_header(data: bytes) -> tuple[str, int, int] | None:
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


def end_problem(data: bytes, fmt: str) -> str | None:
    """Why the image bytes of PIL format ``fmt`` look cut short (no JPEG end-of-image marker
    after the first scan, no PNG IEND chunk), or None."""
    if fmt in ("JPEG", "MPO") and data.rfind(b"\xff\xd9", jpeg_scan_offset(data)) == -1:
        return "truncated JPEG: no end-of-image marker"
    if fmt == "PNG" and data.rfind(b"IEND", 8) == -1:
        return "truncated PNG: no IEND chunk"
    return None


def jpeg_exif_orientation(data: bytes) -> tuple[int, int] | None:
    """(offset in ``data`` of the value, value) of the EXIF orientation tag of a JPEG, read as
    TorchCodec reads it (IFD0 of the first APP1 segment, after its 6-byte ``Exif\\0\\0``
    header); None where there is none. TorchCodec's decoders apply this orientation, the
    other decoders here do not: :mod:`wdstool.format.decode` neutralizes it before calling
    TorchCodec, so every decoder gives the stored pixel layout the header's size describes."""
    pos = next((p for marker, p in jpeg_segments(data) if marker == 0xE1), None)
    if pos is None:
        return None
    end = min(len(data), pos + 2 + int.from_bytes(data[pos + 2 : pos + 4], "big"))
    tiff = pos + 4 + 6
    order = data[tiff : tiff + 2]
    if order not in (b"II", b"MM") or end - tiff < 8:
        return None
    big = "big" if order == b"MM" else "little"

    def u16(at: int) -> int | None:
        return int.from_bytes(data[at : at + 2], big) if at + 2 <= end else None

    if u16(tiff + 2) != 0x2A:
        return None
    ifd = tiff + int.from_bytes(data[tiff + 4 : tiff + 8], big)
    for i in range(u16(ifd) or 0):
        entry = ifd + 2 + 12 * i
        tag = u16(entry)
        if tag is None:
            return None
        if tag == 0x0112:
            value = u16(entry + 8)
            return None if value is None else (entry + 8, value)
    return None


def numbered_image(ext: str) -> int | None:
    """The index of a numbered image member of a sample with several images (``"3.jpg"`` of
    ``KEY.3.jpg`` -> 3); None for any other extension."""
    n, dot, rest = ext.partition(".")
    return int(n) if dot and n.isdigit() and rest.lower() in IMAGE_EXTENSIONS else None


class WithNumberedImages(frozenset[str]):
    """A set of member extensions that also holds every numbered image (``"0.jpg"``,
    ``"12.png"``): what a reader keeps of samples with several images."""

    def __contains__(self, ext: object) -> bool:
        return frozenset.__contains__(self, ext) or (
            isinstance(ext, str) and numbered_image(ext) is not None
        )
