"""Check (and optionally re-encode) one source image before it goes into a shard.

By default an image is not decoded: its header is parsed (format, width, height), its end marker
checked (JPEG EOI, PNG IEND) to catch the common truncated download, and its original bytes are
copied. ``verify_decode`` decodes it fully. ``max_side``/``quality`` re-encode it as JPEG.
``restart_markers`` rewrites a large JPEG (as given or re-encoded) with restart intervals, the
same coefficients (``wdstool.format.restart``), so that the loaders decode only a crop's part.
The member extension comes from the bytes, never from the file name.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from wdstool.format.images import FORMAT_EXT, MAX_PIXELS, end_problem, fast_header
from wdstool.format.restart import add_restarts


class BadImage(Exception):
    """This input cannot go into a shard; the message is the reason shown to the user."""


@dataclass(frozen=True, slots=True)
class PreparedImage:
    payload: bytes
    ext: str
    width: int
    height: int
    fmt: str
    # restart markers, when asked: "added", or why the bytes were kept as they are
    restarts: str = ""


def _check_end(data: bytes, fmt: str) -> None:
    why = end_problem(data, fmt)
    if why:
        raise BadImage(why)


def prepare_image(
    data: bytes,
    *,
    verify_decode: bool = False,
    max_side: int | None = None,
    quality: int | None = None,
    restart_markers: bool = False,
) -> PreparedImage:
    """Validate ``data`` and return the bytes to store; raise BadImage with the reason."""
    img = _prepare(data, verify_decode, max_side, quality)
    if not restart_markers:
        return img
    new = add_restarts(img.payload, (img.width, img.height))
    return PreparedImage(new.data, img.ext, img.width, img.height, img.fmt, new.kept or "added")


def _prepare(
    data: bytes, verify_decode: bool, max_side: int | None, quality: int | None
) -> PreparedImage:
    if not data:
        raise BadImage("empty file")
    fast = (
        None
        if (verify_decode or max_side is not None or quality is not None)
        else fast_header(data)
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
