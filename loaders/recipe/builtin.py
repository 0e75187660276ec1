"""The built-in recipes' pieces, one at a time, through the recipe's own path to the decoder.

The built-in train recipe is RandomResizedCrop(size) (bilinear, antialiased) + horizontal flip
(p=0.5); the eval recipe Resize(shorter side = int(size / 0.875)) + CenterCrop(size). Inside the
loader both are :class:`~loaders.recipe.Recipe` objects (``build_recipe(None, ...)``); the
functions here are those recipes for the benchmark's baselines, the decode-quality script and
tests: a sample through the recipe (:func:`train_sample`, :func:`eval_sample`: the header's
draws, only the region decoded, ``loaders.recipe.region_decode``), or with given parameters
(:func:`train_params` draws what the recipe draws; :func:`decode_train` renders them;
:func:`apply_train`/:func:`train_augment`/:func:`eval_augment` run them on a decoded image as
torchvision's ops do). ``scaled``: a region more than twice the output on both sides is decoded
at 1/2, 1/4 or 1/8 in the DCT domain (slightly different pixels; ``False`` keeps the exact ones).
"""

from __future__ import annotations

import functools
import random

import torch

from loaders.recipe.geometry import Geometry, eval_head, random_resized_crop_params
from loaders.recipe.recipe import Recipe, build_recipe
from loaders.recipe.region_decode import apply, render
from loaders.recipe.seeding import Seeder, Where
from wdstool.format.decode import PARTIAL_DECODE
from wdstool.format.images import MAX_PIXELS

Params = tuple[int, int, int, int, bool]  # (top, left, h, w, flip) of the train recipe
_NO_TAIL = Seeder(Where.WORKER, False)  # the built-in recipes have no tail: nothing is seeded


@functools.cache
def builtin(size: int, train: bool = True) -> Recipe:
    """The built-in train (or eval) recipe at ``size``, as make_loader builds it."""
    return build_recipe(None, train=train, image_size=size)


def train_params(height: int, width: int, rng: random.Random) -> Params:
    """(top, left, h, w, flip) of the train recipe for a ``height`` x ``width`` image: the draws
    the recipe's head makes, from the image header alone."""
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
    return render(data, g, out, partial=partial, scaled=scaled, max_pixels=max_pixels, where=where)


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
    """Decode + train recipe of one image's bytes, any format, as the loader runs it: the crop
    drawn from a JPEG's header (only the crop decoded), from the decoded image otherwise."""
    recipe = builtin(size)
    return recipe(data, rng, _NO_TAIL, out, partial=partial, scaled=scaled, where=where)


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
    """Decode + eval recipe of one image's bytes, as the loader runs it: with ``scaled``, a
    JPEG whose centre region (``eval_box``) is more than twice ``size`` on both sides has only
    that region decoded, at a reduced scale, and resized."""
    recipe = builtin(size, train=False)
    return recipe(
        data,
        random.Random(0),
        _NO_TAIL,
        out,
        partial=partial,
        scaled=scaled,
        max_pixels=max_pixels,
        where=where,
    )


__all__ = [
    "Params",
    "apply_train",
    "builtin",
    "decode_train",
    "eval_augment",
    "eval_box",
    "eval_sample",
    "train_augment",
    "train_params",
    "train_sample",
]
