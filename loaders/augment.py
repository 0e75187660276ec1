"""Augmentation of decoded images, uint8 CHW: the train crop/resize/flip and the eval transform.

The train augmentation's draws come from an explicit ``random.Random`` (never torch's global
RNG), so a worker's output is a pure function of its seeds; they can be drawn from the image
header alone (:func:`train_params`), so that only the crop of a JPEG is decoded
(:func:`train_sample`: the same pixels as decoding the whole image). The eval transform's
region is known from the header too (:func:`eval_box`, :func:`eval_sample`).

Scaled decode (``scaled=True``, the loader's default ``scaled_decode``): a JPEG region more
than twice the output size on both sides is decoded at 1/2, 1/4 or 1/8 scale in the DCT domain,
the largest reduction that keeps it at least the output size (``decode.scale_for``), then
resized as usual. That is a fraction of the work of a full-scale decode, and slightly different
pixels (a scaled IDCT instead of part of the antialiased resize, region edges rounded to the
scaled grid); ``scaled=False`` keeps the exact pixels. Smaller regions are decoded at full
scale: their pixels are the same either way. Normalization belongs on the training device:
:func:`normalize` takes uint8 batches there.
"""

from __future__ import annotations

import math
import random

import torch
from torchvision.transforms.v2 import functional as F

from wdstool.format.decode import (
    PARTIAL_DECODE,
    decode_crop,
    decode_rgb,
    header_size,
    scale_for,
)
from wdstool.format.images import MAX_PIXELS, is_jpeg

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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


def decode_train(
    data: bytes,
    size: int,
    params: tuple[int, int, int, int, bool],
    out: torch.Tensor | None = None,
    *,
    partial: bool = PARTIAL_DECODE,
    scaled: bool = True,
    max_pixels: int = MAX_PIXELS,
    where: str = "",
) -> torch.Tensor:
    """``apply_train(decode_rgb(data), size, params, out)``, for a JPEG by decoding only the
    crop ``params`` names (``train_params`` of its ``header_size``): the same pixels, except
    that with ``scaled`` a crop more than twice ``size`` on both sides is decoded at a reduced
    scale (see the module's docstring)."""
    if partial and is_jpeg(data):
        top, left, h, w, flip = params
        crop = decode_crop(data, top, left, h, w, scale=scale_for(h, w, size) if scaled else 1)
        if crop is not None:
            return apply_train(crop, size, (0, 0, crop.shape[1], crop.shape[2], flip), out)
    return apply_train(decode_rgb(data, max_pixels=max_pixels, where=where), size, params, out)


def train_sample(
    data: bytes,
    size: int,
    rng: random.Random,
    out: torch.Tensor | None = None,
    *,
    partial: bool = PARTIAL_DECODE,
    scaled: bool = True,
    where: str = "",
) -> torch.Tensor:
    """Decode + train augmentation of one image's bytes, any format: for a JPEG the crop is
    drawn from its header and only the crop decoded (``decode_train``); otherwise
    ``train_augment(decode_rgb(data))``. The same draws from ``rng`` and the same pixels
    either way (up to the scaled decode of large crops, with ``scaled``)."""
    if partial and is_jpeg(data):
        width, height = header_size(data, where=where)
        params = train_params(height, width, rng)
        return decode_train(data, size, params, out, partial=True, scaled=scaled, where=where)
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


def eval_box(height: int, width: int, size: int) -> tuple[float, float, float, float]:
    """(top, left, h, w), in pixels of the ``height`` x ``width`` image (fractional), of the
    region that ``eval_augment`` turns into its output: torchvision's resized size and centre
    crop offsets, mapped back through the resize."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = int(size / 0.875), int(int(size / 0.875) * long / short)
    new_w, new_h = (new_short, new_long) if width <= height else (new_long, new_short)
    top, left = round((new_h - size) / 2.0), round((new_w - size) / 2.0)
    fy, fx = height / new_h, width / new_w
    return top * fy, left * fx, size * fy, size * fx


def eval_sample(
    data: bytes,
    size: int,
    out: torch.Tensor | None = None,
    *,
    partial: bool = PARTIAL_DECODE,
    scaled: bool = True,
    max_pixels: int = MAX_PIXELS,
    where: str = "",
) -> torch.Tensor:
    """Decode + eval transform of one image's bytes: ``eval_augment(decode_rgb(data))``; with
    ``scaled``, for a JPEG whose centre region (``eval_box``) is more than twice ``size`` on
    both sides, only that region is decoded, at the reduced scale ``decode.scale_for`` picks,
    and resized (antialiased) to ``size`` x ``size``."""
    if partial and scaled and is_jpeg(data):
        width, height = header_size(data, max_pixels=max_pixels, where=where)
        top, left, h, w = eval_box(height, width, size)
        scale = scale_for(h, w, size)
        if scale > 1:
            crop = decode_crop(data, top, left, h, w, scale=scale)
            if crop is not None:
                return apply_train(crop, size, (0, 0, crop.shape[1], crop.shape[2], False), out)
    return eval_augment(decode_rgb(data, max_pixels=max_pixels, where=where), size, out)


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
