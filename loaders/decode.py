"""Image decode and augmentation, producing uint8 CHW tensors.

JPEG goes through libjpeg-turbo (``torchvision.io.decode_jpeg``), PNG/WEBP/GIF through
``torchvision.io.decode_image``, anything else through PIL. Declared dimensions are checked
before any full decode (decompression bombs). The train augmentation of a JPEG decodes only
its crop where the partial decoder (``loaders/_jpegcrop.c``) is built: the same pixels.
Augmentation uses an explicit ``random.Random``
(never torch's global RNG), so a worker's output is a pure function of its seeds.
Normalization belongs on the training device: ``normalize`` takes uint8 batches there.
"""

from __future__ import annotations

import io
import math
import os
import random
import warnings

import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_image, decode_jpeg
from torchvision.transforms.v2 import functional as F

from shard_writer.image import jpeg_size
from wdstool.errors import SampleError

try:
    from loaders import _jpegcrop
except ImportError:  # built without a C compiler or libjpeg headers: whole-image decode
    _jpegcrop = None

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    {"jpg", "jpeg", "png", "webp", "bmp", "ppm", "pgm", "tif", "tiff", "gif"}
)
MAX_PIXELS = 89_478_485
# torchvision 0.29 warns on every decode call that its codecs are deprecated in favour of
# TorchCodec; the functions still work and are what we measured. Silence exactly that warning.
warnings.filterwarnings("ignore", message=r"The image decoding and encoding capabilities")
# WDSTOOL_PARTIAL_DECODE=0 turns the partial decoder off (diagnosis, benchmarks)
PARTIAL_DECODE = _jpegcrop is not None and os.environ.get("WDSTOOL_PARTIAL_DECODE", "1") != "0"
# decode only reads the bytes: torch.frombuffer over immutable bytes is safe here
warnings.filterwarnings("ignore", message=r"The given buffer is not writable")


def _kind(data: bytes) -> str:
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:4] in (b"GIF8",):
        return "gif"
    return "other"


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
    if _kind(data) == "jpeg":
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


def is_jpeg(data: bytes) -> bool:
    return _kind(data) == "jpeg"


def decode_rgb(
    data: bytes, ext: str = "", *, max_pixels: int = MAX_PIXELS, where: str = ""
) -> torch.Tensor:
    """Decode image bytes to a uint8 RGB tensor [3,H,W]; the format comes from the bytes."""
    if not data:
        raise _fail(where, "empty image member")
    kind = _kind(data)
    try:
        if kind == "jpeg":
            header_size(data, max_pixels=max_pixels, where=where)
            return decode_jpeg(torch.frombuffer(data, dtype=torch.uint8), mode=ImageReadMode.RGB)
        if kind in ("png", "webp", "gif"):
            with Image.open(io.BytesIO(data)) as probe:  # header only: dimensions
                _check_pixels(probe.width, probe.height, max_pixels, where)
            img = decode_image(torch.frombuffer(data, dtype=torch.uint8), mode=ImageReadMode.RGB)
            return img[0] if img.ndim == 4 else img  # GIF: first frame
    except SampleError:
        raise
    except Exception as exc:  # torchvision raises RuntimeError; PIL a zoo of errors
        if kind == "jpeg":
            raise _fail(where, f"cannot decode JPEG: {exc}") from None
        return _pil_decode(data, max_pixels, where)
    return _pil_decode(data, max_pixels, where)


def random_resized_crop_params(
    height: int,
    width: int,
    rng: random.Random,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> tuple[int, int, int, int]:
    """(top, left, h, w): torchvision's RandomResizedCrop.get_params, driven by ``rng``."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = round(w / min(ratio))
    elif in_ratio > max(ratio):
        h = height
        w = round(h * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _into(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return result
    out.copy_(result)
    return out


_AA = getattr(torch._C._nn, "_upsample_bilinear2d_aa", None)


def _resize_aa(crop: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear antialiased resize of a [3,h,w] tensor to [3,size,size]: the kernel torchvision's
    ``F.resize(..., antialias=True)`` runs, called directly (its wrappers cost ~18 us a sample,
    1.5% of a worker's time here); the same values (tested)."""
    if _AA is not None and crop.device.type == "cpu":
        try:
            return _AA(crop.unsqueeze(0), [size, size], False).squeeze(0)
        except (RuntimeError, TypeError):  # an unexpected dtype or a changed signature
            pass
    return F.resize(crop, [size, size], antialias=True)


def train_params(height: int, width: int, rng: random.Random) -> tuple[int, int, int, int, bool]:
    """(top, left, h, w, flip) of the train augmentation: the draws ``train_augment`` makes, so
    a worker can compute them from the image header and leave the pixels to the GPU."""
    top, left, h, w = random_resized_crop_params(height, width, rng)
    return top, left, h, w, rng.random() < 0.5


_AA_OUT = getattr(getattr(torch.ops.aten, "_upsample_bilinear2d_aa", None), "out", None)
_FLIP_OUT = getattr(getattr(torch.ops.aten, "flip", None), "out", None)


def apply_train(
    img: torch.Tensor,
    size: int,
    params: tuple[int, int, int, int, bool],
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Crop, antialiased resize to size x size and flip, on img's device; into ``out`` (a
    [3,size,size] uint8 slot of a batch) when given, without an intermediate copy."""
    top, left, h, w, flip = params
    crop = img[:, top : top + h, left : left + w]
    if (
        out is not None
        and _AA_OUT is not None
        and (_FLIP_OUT is not None or not flip)
        and crop.device.type == "cpu"
        and out.dtype == crop.dtype
    ):
        # flipped: resize into a scratch laid out as ``out``, then flip into the slot (for a
        # channels-last slot the resize writes packed pixels, ~79 us; resizing to [3,S,S]
        # and flipping across layouts would cost ~214 us in all)
        target = torch.empty_like(out) if flip else out
        try:
            _AA_OUT(crop.unsqueeze(0), [size, size], False, out=target.unsqueeze(0))
            if flip:
                _FLIP_OUT(target, [-1], out=out)
            return out
        except (RuntimeError, TypeError):
            pass
    resized = _resize_aa(crop, size)
    return _into(resized.flip(-1) if flip else resized, out)


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


def decode_train(
    data: bytes,
    size: int,
    params: tuple[int, int, int, int, bool],
    out: torch.Tensor | None = None,
    *,
    partial: bool = PARTIAL_DECODE,
    max_pixels: int = MAX_PIXELS,
    where: str = "",
) -> torch.Tensor:
    """``apply_train(decode_rgb(data), size, params, out)``, for a JPEG by decoding only the
    crop ``params`` names (``train_params`` of its ``header_size``). Same pixels either way."""
    if partial and is_jpeg(data):
        top, left, h, w, flip = params
        crop = decode_crop(data, top, left, h, w)
        if crop is not None:
            return apply_train(crop, size, (0, 0, h, w, flip), out)
    return apply_train(decode_rgb(data, max_pixels=max_pixels, where=where), size, params, out)


def train_sample(
    data: bytes,
    size: int,
    rng: random.Random,
    out: torch.Tensor | None = None,
    *,
    partial: bool = PARTIAL_DECODE,
    where: str = "",
) -> torch.Tensor:
    """Decode + train augmentation of one image's bytes, any format: for a JPEG the crop is
    drawn from its header and only the crop decoded (``decode_train``); otherwise
    ``train_augment(decode_rgb(data))``. The same draws from ``rng`` and the same pixels
    either way."""
    if partial and is_jpeg(data):
        width, height = header_size(data, where=where)
        params = train_params(height, width, rng)
        return decode_train(data, size, params, out, partial=True, where=where)
    return train_augment(decode_rgb(data, where=where), size, rng, out)


def train_augment(
    img: torch.Tensor, size: int, rng: random.Random, out: torch.Tensor | None = None
) -> torch.Tensor:
    """RandomResizedCrop(size) (bilinear, antialiased) + horizontal flip (p=0.5), uint8."""
    _, height, width = img.shape
    return apply_train(img, size, train_params(height, width, rng), out)


def eval_augment(img: torch.Tensor, size: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Resize(shorter side = int(size / 0.875)) + CenterCrop(size): the classic eval transform."""
    resized = F.resize(img, [int(size / 0.875)], antialias=True)
    return _into(F.center_crop(resized, [size, size]), out)


def normalize(
    x: torch.Tensor,
    mean: tuple[float, ...] = IMAGENET_MEAN,
    std: tuple[float, ...] = IMAGENET_STD,
    *,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(x - 255*mean) / (255*std) for uint8 (or 0..255 float) images [..., 3, H, W], computed on
    x's device: call it after the (non_blocking) copy of a uint8 batch to the GPU."""
    shape = (3, 1, 1)
    m = torch.tensor(mean, dtype=dtype, device=x.device).mul_(255).view(shape)
    inv = torch.tensor(std, dtype=dtype, device=x.device).mul_(255).reciprocal_().view(shape)
    return x.to(dtype).sub_(m).mul_(inv)


def normalize_into(
    x: torch.Tensor,
    out: torch.Tensor,
    mean: tuple[float, ...] = IMAGENET_MEAN,
    std: tuple[float, ...] = IMAGENET_STD,
) -> torch.Tensor:
    """``normalize(x)`` written into the preallocated float tensor ``out`` (no temporaries the
    size of the batch: a DataLoader worker fills a reusable shared-memory buffer)."""
    shape = (3, 1, 1)
    m = torch.tensor(mean, dtype=out.dtype, device=out.device).mul_(255).view(shape)
    inv = torch.tensor(std, dtype=out.dtype, device=out.device).mul_(255).reciprocal_().view(shape)
    out.copy_(x)
    return out.sub_(m).mul_(inv)
