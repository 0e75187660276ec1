"""Image member bytes -> uint8 RGB pixels [3,H,W]: the one place images are decoded.

Every decode in the project goes through here, along a fallback chain, so the loaders keep
working whatever codecs a machine has:

1. a rectangle of a JPEG, optionally at 1/2, 1/4 or 1/8 scale: the partial decoder
   (``wdstool/format/_jpegcrop.c``, libjpeg-turbo's skip/crop-scanline API and scaled IDCT),
   where it is built; it declines what it should not be trusted with, which goes to 2;
2. whole images: ``torchvision.io`` while torchvision ships its codecs (deprecated since 0.29
   in favour of TorchCodec), else TorchCodec (``torchcodec.decoders``, JPEG only) where it is
   installed;
3. PIL.

The links give the same pixels and the same verdicts: torchvision, TorchCodec and PIL all
decode JPEGs with libjpeg-turbo's defaults (islow IDCT, fancy upsampling); TorchCodec applies
EXIF orientation and has no switch for it, so its input has the orientation tag set to
"normal" first (the crop boxes are drawn from the stored size); PIL's JPEG path adds the check
libjpeg's finish step makes (an end-of-image marker after the scan). Declared dimensions are
checked before any full decode (decompression bombs). 16-bit PNGs become 8-bit by rounding
(torchvision returns them as uint16).
"""

from __future__ import annotations

import io
import logging
import math
import os
import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image

from wdstool.base import counters
from wdstool.base.errors import SampleError
from wdstool.format.images import MAX_PIXELS, end_problem, jpeg_exif_orientation, jpeg_size, kind

log = logging.getLogger(__name__)

try:
    from wdstool.format import _jpegcrop
except ImportError:  # built without a C compiler or libjpeg headers: whole-image decode
    _jpegcrop = None

# torchvision 0.29 warns on every decode call that its codecs are deprecated in favour of
# TorchCodec; the functions still work and are what we measured. Silence exactly that warning.
warnings.filterwarnings("ignore", message=r"The image decoding and encoding capabilities")
# decode only reads the bytes: torch.frombuffer over immutable bytes is safe here
warnings.filterwarnings("ignore", message=r"The given buffer is not writable")


class Codec(NamedTuple):
    """A whole-image decoder library: ``jpeg(bytes tensor)`` and ``image(bytes tensor)`` give
    uint8 (or uint16) [3,H,W] RGB; ``jpegs(list, device)`` decodes a batch of JPEGs on a device
    (nvJPEG on CUDA); ``image`` is None where the library is used for JPEG only."""

    name: str
    jpeg: Callable[[torch.Tensor], torch.Tensor]
    image: Callable[[torch.Tensor], torch.Tensor] | None
    jpegs: Callable[[list[torch.Tensor], torch.device], list[torch.Tensor]]


def _load_torchvision() -> Codec | None:
    try:
        from torchvision.io import ImageReadMode, decode_image, decode_jpeg
    except ImportError:  # a torchvision without its codecs
        return None
    rgb = ImageReadMode.RGB
    return Codec(
        "torchvision",
        lambda t: decode_jpeg(t, mode=rgb),
        lambda t: decode_image(t, mode=rgb),
        lambda ts, device: decode_jpeg(ts, mode=rgb, device=device),
    )


def _load_torchcodec() -> Codec | None:
    try:
        from torchcodec.decoders import decode_jpeg
    except (ImportError, OSError, RuntimeError) as exc:  # absent, or built for another torch
        log.debug("TorchCodec not usable: %s", exc)
        return None
    # its PNG/WEBP/GIF decoders apply EXIF orientation too: those formats stay with PIL
    return Codec(
        "torchcodec",
        lambda t: decode_jpeg(t, mode="RGB"),
        None,
        lambda ts, device: decode_jpeg(ts, mode="RGB", device=device),
    )


# the chain's links, module-level so that tests (and a diagnosis) can switch each one off
_torchvision = _load_torchvision()
_torchcodec = _load_torchcodec()
# WDSTOOL_PARTIAL_DECODE=0 turns the partial decoder off (diagnosis, benchmarks)
PARTIAL_DECODE = _jpegcrop is not None and os.environ.get("WDSTOOL_PARTIAL_DECODE", "1") != "0"
# WDSTOOL_RESTART_DECODE=0 keeps the partial decoder off a JPEG's restart intervals (it then
# decodes every row above a crop, as for a file without them): diagnosis, benchmarks
RESTART_DECODE = os.environ.get("WDSTOOL_RESTART_DECODE", "1") != "0"


def _codec() -> Codec | None:
    return _torchvision or _torchcodec


def whole_decoder() -> str:
    """Which library decodes whole images here: "torchvision", "torchcodec" or "pil"."""
    codec = _codec()
    return codec.name if codec is not None else "pil"


def _fail(where: str, why: str) -> SampleError:
    return SampleError(f"{where}: {why}" if where else why)


def _check_pixels(width: int, height: int, max_pixels: int, where: str) -> None:
    if width <= 0 or height <= 0:
        raise _fail(where, f"invalid image size {width}x{height}")
    if width * height > max_pixels:
        raise _fail(where, f"image too large: {width}x{height} pixels (limit {max_pixels})")


def _to_uint8(img: torch.Tensor) -> torch.Tensor:
    """16-bit samples (torchvision's 16-bit PNGs) to 8 bits, rounded as TorchCodec does."""
    if img.dtype == torch.uint8:
        return img
    return ((img.to(torch.int32) * 255 + 32767) // 65535).to(torch.uint8)


def _pil_decode(data: bytes, max_pixels: int, where: str) -> torch.Tensor:
    jpeg = kind(data) == "jpeg"
    what = "JPEG" if jpeg else "image"
    if jpeg and (problem := end_problem(data, "JPEG")):  # libjpeg's finish step rejects it
        raise _fail(where, f"cannot decode JPEG: {problem}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            _check_pixels(img.width, img.height, max_pixels, where)
            if img.mode in ("I;16", "I;16L", "I;16B", "I"):  # 16-bit grey: round as above
                grey = np.asarray(img).astype(np.int64)
                grey = ((grey * 255 + 32767) // 65535).clip(0, 255).astype(np.uint8)
                img = Image.fromarray(grey, "L")
            img = img.convert("RGB")
    except SampleError:
        raise
    except Exception as exc:  # PIL raises a zoo of errors on bad data
        raise _fail(where, f"cannot decode {what}: {type(exc).__name__}: {exc}") from None
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


def _stored_layout(data: bytes, codec: Codec) -> torch.Tensor:
    """The JPEG bytes as a tensor for ``codec``; for TorchCodec with the EXIF orientation tag
    set to 1 (as stored), so that it decodes the layout the other decoders give."""
    if codec.name == "torchcodec":
        found = jpeg_exif_orientation(data)
        if found is not None and 2 <= found[1] <= 8:
            at = found[0]
            fixed = bytearray(data)
            fixed[at : at + 2] = b"\x00\x01" if data[at] == 0 else b"\x01\x00"
            return torch.frombuffer(fixed, dtype=torch.uint8)
    return torch.frombuffer(data, dtype=torch.uint8)


def decode_rgb(
    data: bytes, ext: str = "", *, max_pixels: int = MAX_PIXELS, where: str = ""
) -> torch.Tensor:
    """Decode image bytes to a uint8 RGB tensor [3,H,W]; the format comes from the bytes.
    Its wall time counts as the ``decode`` stage (``wdstool.base.counters``)."""
    return counters.timed("decode", _decode_rgb, data, max_pixels, where)


def _decode_rgb(data: bytes, max_pixels: int, where: str) -> torch.Tensor:
    if not data:
        raise _fail(where, "empty image member")
    fmt = kind(data)
    codec = _codec()
    if fmt == "jpeg":
        header_size(data, max_pixels=max_pixels, where=where)
        if codec is None:
            return _pil_decode(data, max_pixels, where)
        try:
            return _to_uint8(codec.jpeg(_stored_layout(data, codec)))
        except Exception as exc:  # torchvision and TorchCodec raise RuntimeError
            raise _fail(where, f"cannot decode JPEG: {exc}") from None
    image = _torchvision.image if _torchvision is not None else None
    if fmt in ("png", "webp", "gif") and image is not None:
        try:
            with Image.open(io.BytesIO(data)) as probe:  # header only: dimensions
                _check_pixels(probe.width, probe.height, max_pixels, where)
            img = image(torch.frombuffer(data, dtype=torch.uint8))
            return _to_uint8(img[0] if img.ndim == 4 else img)  # GIF: first frame
        except SampleError:
            raise
        except Exception:  # torchvision's RuntimeError, PIL's errors: PIL gives the verdict
            pass
    return _pil_decode(data, max_pixels, where)


def decode_hwc(
    data: bytes, ext: str = "", *, max_pixels: int = MAX_PIXELS, where: str = ""
) -> torch.Tensor:
    """``decode_rgb``'s pixels laid out channels-last ([3,H,W] over [H,W,3] memory), which is
    what the antialiased uint8 resize kernels run fast on: ~3x faster here than on the planar
    layout torchvision's decoders return (the values are the same either way). A JPEG is
    decoded whole by the partial decoder, which writes that layout (libjpeg's own); other
    images, and JPEGs it declines, are decoded by ``decode_rgb`` and repacked."""
    if PARTIAL_DECODE and kind(data) == "jpeg":
        width, height = header_size(data, max_pixels=max_pixels, where=where)
        img = decode_crop(data, 0, 0, height, width)
        if img is not None:
            return img
    img = decode_rgb(data, ext, max_pixels=max_pixels, where=where)
    return img.permute(1, 2, 0).contiguous().permute(2, 0, 1)


def decode_jpegs(datas: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """JPEG byte tensors -> uint8 RGB [3,H,W] on ``device``: one batched call where the codec
    decodes on that device (nvJPEG through torchvision or TorchCodec), else one by one here
    and moved there."""
    codec = _codec()
    if codec is not None and device.type != "cpu":
        if codec.name == "torchcodec":
            datas = [_stored_layout(bytes(d.numpy()), codec) for d in datas]
        return [_to_uint8(img) for img in codec.jpegs(datas, device)]
    return [decode_rgb(bytes(d.numpy())).to(device) for d in datas]


# --- decoding only part of a JPEG, optionally at a reduced scale --------------------------

SCALES = (8, 4, 2)  # libjpeg-turbo's fast DCT-domain reductions (1/2 and 1/4 have SIMD)


def scale_for(h: float, w: float, size: int | tuple[int, int]) -> int:
    """The reduction (8, 4, 2, or 1 = none) at which to decode an ``h`` x ``w`` region of a
    JPEG that becomes ``size`` (an int: square; or (height, width)): for a region more than
    twice the output on both sides, the largest that keeps it at least the output on both
    sides; 1 otherwise (so the pixels of small crops are exactly those of a full-scale
    decode)."""
    oh, ow = (size, size) if isinstance(size, int) else size
    if h <= 2 * oh or w <= 2 * ow:
        return 1
    return next((d for d in SCALES if h >= d * oh and w >= d * ow), 1)


def scaled_box(
    top: float, left: float, h: float, w: float, scale: int
) -> tuple[int, int, int, int]:
    """(top, left, h, w) of the region in the image decoded at 1/``scale``: each edge rounded
    to the nearest pixel of the scaled image, so a region of at least ``scale * n`` pixels a
    side keeps at least ``n``; stays inside the scaled image (its size rounded up)."""

    def edge(v: float) -> int:
        return math.floor(v / scale + 0.5)

    t, left_, b, r = edge(top), edge(left), edge(top + h), edge(left + w)
    return t, left_, max(1, b - t), max(1, r - left_)


def decode_crop(
    data: bytes, top: float, left: float, h: float, w: float, *, scale: int = 1
) -> torch.Tensor | None:
    """The [3,h,w] uint8 rectangle of a JPEG, decoding only what it needs (rows above it are
    skipped, columns outside a band around it and rows below it never decoded; in a file cut
    into restart intervals, such as ``pack --restart-markers`` writes, only the intervals that
    cover the rectangle are read at all); the pixels a whole-image ``decode_rgb`` has there. With ``scale`` 2, 4 or 8 the image is decoded at
    that reduction in the DCT domain and the result is the rectangle's ``scaled_box``: the
    pixels of libjpeg's whole scaled decode there (the box may then be fractional; at scale 1
    it is whole pixels). None where this decoder is not built or not
    to be trusted with the image (CMYK, a libjpeg error or warning, no end-of-image marker at
    the end): decode it whole instead, which also gives the error message. The end check keeps
    a truncated file rejected, as the whole-image decoder rejects it, even when the cut lies
    below the rectangle."""
    if _jpegcrop is None or not data.endswith(b"\xff\xd9"):
        return None
    box = scaled_box(top, left, h, w, scale) if scale != 1 else (top, left, h, w)
    t, x, bh, bw = (int(v) for v in box)
    out = torch.empty((bh, bw, 3), dtype=torch.uint8)
    try:
        done = counters.timed(
            "decode", _jpegcrop.decode_crop, data, x, t, bw, bh, out.numpy(), scale, RESTART_DECODE
        )
    except ValueError:
        return None
    return out.permute(2, 0, 1) if done else None
