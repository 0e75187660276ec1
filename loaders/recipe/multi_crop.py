"""Several crops of one sample (multi-crop: DINO's 2 global + 8 local views, SimCLR's 2).

:func:`run_views` parses the header once, draws every view's geometry (each view from its own
generator: seeded per sample and view index), then decodes either each view's region alone or
the whole image once for all of them, whichever costs less, and runs each view's tail.

The choice, measured here on the bench images (~450x380, libjpeg-turbo): decoding a region of
a share ``a`` of the image costs about ``0.45 + 0.45 a`` of a whole decode (the entropy-coded
data above and inside the region is parsed whatever its width), so the views' regions are
decoded alone while the sum of those costs stays below one whole decode (a single crop: always;
two: small ones only; DINO's ten: never) and the whole image is decoded once otherwise.
"""

from __future__ import annotations

import random

import torch

from loaders.recipe.geometry import Geometry
from loaders.recipe.recipe import Recipe
from loaders.recipe.region_decode import apply, render
from loaders.recipe.seeding import Seeder
from wdstool.format.decode import PARTIAL_DECODE, decode_hwc, header_size
from wdstool.format.images import MAX_PIXELS, is_jpeg

REGION_FIXED, REGION_AREA = 0.45, 0.45  # a region's decode cost, in whole decodes (see above)


def partial_cost(geoms: list[Geometry], height: int, width: int) -> float:
    """Decoding each of ``geoms``' regions alone, in whole-image decodes."""
    area = height * width
    cost = 0.0
    for g in geoms:
        _t, _l, h, w = g.source_box()
        cost += REGION_FIXED + REGION_AREA * (h * w) / area
    return cost


def run_views(
    recipes: tuple[Recipe, ...],
    data: bytes,
    rngs: list[random.Random],
    seeder: Seeder,
    outs: list[torch.Tensor | None],
    *,
    partial: bool = PARTIAL_DECODE,
    scaled: bool = True,
    max_pixels: int = MAX_PIXELS,
    where: str = "",
) -> list[torch.Tensor]:
    """Every view of one sample: ``recipes[v]`` drawn from ``rngs[v]``, written into
    ``outs[v]`` when given (the result is ``outs[v]`` itself unless a tail made a new one)."""
    whole: torch.Tensor | None = None
    jpeg = partial and is_jpeg(data)
    if jpeg:
        width, height = header_size(data, max_pixels=max_pixels, where=where)
    else:
        whole = decode_hwc(data, max_pixels=max_pixels, where=where)
        height, width = whole.shape[-2:]
    geoms = [
        None if r.head is None else r.head.draw(height, width, rng)
        for r, rng in zip(recipes, rngs, strict=True)
    ]
    if whole is None and (
        any(g is None for g in geoms) or partial_cost(geoms, height, width) > 1.0  # type: ignore[arg-type]
    ):
        whole = decode_hwc(data, max_pixels=max_pixels, where=where)
    images = []
    for recipe, g, rng, out in zip(recipes, geoms, rngs, outs, strict=True):
        if g is None:
            img = whole
        elif whole is not None:
            img = apply(whole, g, out)
        else:
            img = render(data, g, out, scaled=scaled, max_pixels=max_pixels, where=where)
        images.append(recipe.finish(img, rng, seeder))
    return images  # type: ignore[return-value]


__all__ = ["partial_cost", "run_views"]
