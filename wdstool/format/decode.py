"""Image member bytes -> uint8 RGB pixels [3,H,W]: the one place images are decoded.

JPEG goes through libjpeg-turbo (``torchvision.io.decode_jpeg``), PNG/WEBP/GIF through
``torchvision.io.decode_image``, anything else through PIL. Declared dimensions are checked
before any full decode (decompression bombs). :func:`decode_crop` decodes only a rectangle of
a JPEG where the partial decoder (``wdstool/format/_jpegcrop.c``, libjpeg-turbo's
skip/crop-scanline API) is built: the pixels a whole-image decode has there.
"""

from __future__ import annotations

import io
import os
import warnings

import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_image, decode_jpeg

from wdstool.base.errors import SampleError
from wdstool.format.images import MAX_PIXELS, jpeg_size, kind

try:
    from wdstool.format import _jpegcrop
except ImportError:  # built without a C compiler or libjpeg headers: whole-image decode
    _jpegcrop = None

# torchvision 0.29 warns on every decode call that its codecs are deprecated in favour of
# TorchCodec; the functions still work and are what we measured. Silence exactly that warning.
warnings.filterwarnings("ignore", message=r"The image decoding and encoding capabilities")
# WDSTOOL_PARTIAL_DECODE=0 turns the partial decoder off (diagnosis, benchmarks)
PARTIAL_DECODE = _jpegcrop is not None and os.environ.get("WDSTOOL_PARTIAL_DECODE", "1") != "0"
# decode only reads the bytes: torch.frombuffer over immutable bytes is safe here
warnings.filterwarnings("ignore", message=r"The given buffer is not writable")


def _fail(where: str, why: str) -> SampleError:
    return SampleError(f"{where}: {why}" if where else why)


def _check_pixels(width: int, height: int, max_pixels: int, where: str) -> None:
    if width <= 0 or height <= 0:
        raise _fail(where, f"invalid image size {width}x{height}")
    if width * height > max_pixels:
        raise _fail(where, f"image too large: {width}x{height} pixels (limit {max_pixels})")


def _pil_decode(data: bytes, max_pixels: int, where: str) -> torch.Tensor:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            _check_pixels(img.width, img.height, max_pixels, where)
            img = img.convert("RGB")
    except SampleError:
        raise
    except Exception as exc:
        raise _fail(where, f"cannot decode image: {type(exc).__name__}: {exc}") from None
    return (
        torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8)
        .view(img.height, img.width, 3)
        .permute(2, 0, 1)
    )


def header_size(data: bytes, *, max_pixels: int = MAX_PIXELS, where: str = "") -> tuple[int, int]:
    """(width, height) from the image header, without decoding, checked against
    ``max_pixels`` (decompression bombs); SampleError naming ``where`` otherwise."""
    if not data:
        raise _fail(where, "empty image member")
    if kind(data) == "jpeg":
        size = jpeg_size(data)
        if size is None:
            raise _fail(where, "corrupt JPEG: no frame header")
    else:
        try:
            with Image.open(io.BytesIO(data)) as probe:
                size = probe.size
        except Exception as exc:
            raise _fail(where, f"cannot read image header: {exc}") from None
    _check_pixels(*size, max_pixels, where)
    return size


def decode_rgb(
    data: bytes, ext: str = "", *, max_pixels: int = MAX_PIXELS, where: str = ""
) -> torch.Tensor:
    """Decode image bytes to a uint8 RGB tensor [3,H,W]; the format comes from the bytes."""
    if not data:
        raise _fail(where, "empty image member")
    fmt = kind(data)
    try:
        if fmt == "jpeg":
            header_size(data, max_pixels=max_pixels, where=where)
            return decode_jpeg(torch.frombuffer(data, dtype=torch.uint8), mode=ImageReadMode.RGB)
        if fmt in ("png", "webp", "gif"):
            with Image.open(io.BytesIO(data)) as probe:  # header only: dimensions
                _check_pixels(probe.width, probe.height, max_pixels, where)
            img = decode_image(torch.frombuffer(data, dtype=torch.uint8), mode=ImageReadMode.RGB)
            return img[0] if img.ndim == 4 else img  # GIF: first frame
    except SampleError:
        raise
    except Exception as exc:  # torchvision raises RuntimeError; PIL a zoo of errors
        if fmt == "jpeg":
            raise _fail(where, f"cannot decode JPEG: {exc}") from None
        return _pil_decode(data, max_pixels, where)
    return _pil_decode(data, max_pixels, where)


def decode_crop(data: bytes, top: int, left: int, h: int, w: int) -> torch.Tensor | None:
    """The [3,h,w] uint8 rectangle of a JPEG, decoding only what it needs (rows above it are
    skipped, columns outside a band around it and rows below it never decoded); the pixels a
    whole-image ``decode_rgb`` has there. None where this decoder is not built or not to be
    trusted with the image (CMYK, a libjpeg error or warning, no end-of-image marker at the
    end): decode it whole instead, which also gives the error message. The end check keeps a
    truncated file rejected, as the whole-image decoder rejects it, even when the cut lies
    below the rectangle."""
    if _jpegcrop is None or not data.endswith(b"\xff\xd9"):
        return None
    out = torch.empty((h, w, 3), dtype=torch.uint8)
    try:
        done = _jpegcrop.decode_crop(data, left, top, w, h, out.numpy())
    except ValueError:
        return None
    return out.permute(2, 0, 1) if done else None
