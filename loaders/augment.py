"""The built-in recipes as functions, and normalization on the training device.

The built-in train recipe is RandomResizedCrop(size) (bilinear, antialiased) + horizontal flip
(p=0.5); the eval recipe Resize(shorter side = int(size / 0.875)) + CenterCrop(size). Both are
:class:`loaders.recipe.Recipe` objects inside the loader; the functions here give their pieces
one at a time (for the benchmark's ceiling, the decode-quality script and tests), through the
same code: draws from an explicit ``random.Random`` (:func:`train_params`), the region of a JPEG
decoded from its header (:func:`decode_train`, :func:`eval_sample`, ``loaders.recipe.render``),
optionally at a reduced scale (``scaled``: a region more than twice the output on both sides is
decoded at 1/2, 1/4 or 1/8 in the DCT domain, slightly different pixels; ``scaled=False`` keeps
the exact ones). Normalization belongs on the training device: :func:`normalize` takes uint8
batches there.
"""

from __future__ import annotations

import random

import torch

from loaders.recipe.geometry import Geometry, eval_head, random_resized_crop_params
from loaders.recipe.render import apply, render
from wdstool.format.decode import PARTIAL_DECODE, decode_rgb, header_size
from wdstool.format.images import MAX_PIXELS, is_jpeg

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
Params = tuple[int, int, int, int, bool]  # (top, left, h, w, flip) of the train recipe


def train_params(height: int, width: int, rng: random.Random) -> Params:
    """(top, left, h, w, flip) of the train recipe for a ``height`` x ``width`` image: the draws
    the loader makes, from the image header alone."""
    top, left, h, w = random_resized_crop_params(height, width, rng)
    return top, left, h, w, rng.random() < 0.5


def _train_geometry(source: tuple[int, int], size: int, params: Params) -> Geometry:
    top, left, h, w, flip = params
    return Geometry(source, top, left, h, w, (size, size), "bilinear", hflip=flip)


def apply_train(
    img: torch.Tensor, size: int, params: Params, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Crop, antialiased resize to size x size and flip, on img's device; into ``out`` (a
    [3,size,size] uint8 slot of a batch) when given, without an intermediate copy."""
    return apply(img, _train_geometry(tuple(img.shape[-2:]), size, params), out)  # type: ignore[arg-type]


def decode_train(
    data: bytes,
    size: int,
    params: Params,
    out: torch.Tensor | None = None,
    *,
    partial: bool = PARTIAL_DECODE,
    scaled: bool = True,
    max_pixels: int = MAX_PIXELS,
    where: str = "",
) -> torch.Tensor:
    """``apply_train(decode_rgb(data), size, params, out)``, for a JPEG by decoding only the
    crop ``params`` names: the same pixels, except with ``scaled`` (see the module)."""
    g = _train_geometry((0, 0), size, params)
    kw = dict(partial=partial, scaled=scaled, max_pixels=max_pixels, where=where)
    return render(data, g, out, **kw)  # type: ignore[arg-type]


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
    """Decode + train recipe of one image's bytes, any format: the crop drawn from a JPEG's
    header (only the crop decoded), from the decoded image otherwise; the same draws from
    ``rng`` and the same pixels either way (up to the scaled decode, with ``scaled``)."""
    if partial and is_jpeg(data):
        width, height = header_size(data, where=where)
        params = train_params(height, width, rng)
        return decode_train(data, size, params, out, partial=True, scaled=scaled, where=where)
    return train_augment(decode_rgb(data, where=where), size, rng, out)


def train_augment(
    img: torch.Tensor, size: int, rng: random.Random, out: torch.Tensor | None = None
) -> torch.Tensor:
    """RandomResizedCrop(size) (bilinear, antialiased) + horizontal flip (p=0.5), uint8."""
    return apply_train(img, size, train_params(img.shape[-2], img.shape[-1], rng), out)


def _eval_geometry(height: int, width: int, size: int) -> Geometry:
    return eval_head((size, size)).draw(height, width, random.Random(0))


def eval_augment(img: torch.Tensor, size: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Resize(shorter side = int(size / 0.875)) + CenterCrop(size): the classic eval transform."""
    return apply(img, _eval_geometry(img.shape[-2], img.shape[-1], size), out)


def eval_box(height: int, width: int, size: int) -> tuple[float, float, float, float]:
    """(top, left, h, w), in pixels of the ``height`` x ``width`` image (fractional), of the
    region that ``eval_augment`` turns into its output: torchvision's resized size and centre
    crop offsets, mapped back through the resize."""
    return _eval_geometry(height, width, size).source_box()


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
    """Decode + eval recipe of one image's bytes: ``eval_augment(decode_rgb(data))``; with
    ``scaled``, for a JPEG whose centre region (``eval_box``) is more than twice ``size`` on
    both sides, only that region is decoded, at a reduced scale, and resized."""
    width, height = header_size(data, max_pixels=max_pixels, where=where)
    g = _eval_geometry(height, width, size)
    return render(data, g, out, partial=partial, scaled=scaled, max_pixels=max_pixels, where=where)


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
