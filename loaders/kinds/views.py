"""Multi-crop: every sample through each view's recipe, batched as ``views``, a list of
uint8 [B,3,h,w] tensors (``make_loader(views=[(transform, count), ...])``)."""

from __future__ import annotations

import random
from typing import Any

from loaders.config import LoaderConfig
from loaders.kinds.base import image_part
from loaders.kinds.pixels import PixelKind
from loaders.read import Located
from loaders.recipe import Seeder
from loaders.recipe.multi_crop import run_views


class ViewsKind(PixelKind):
    name = "views"
    pixel_key = "views"
    listed = True
    keys = ("views",)

    @staticmethod
    def applies(config: LoaderConfig) -> bool:
        return config.recipes.views is not None

    def decode(
        self, loc: Located, rng: random.Random, seeder: Seeder, where: str
    ) -> tuple[Any, dict[str, Any] | None]:
        data = image_part(loc)
        base = rng.getrandbits(64)  # each view from its own generator: seeded per (sample, view)
        rngs = [random.Random(base + v) for v in range(len(self.recipes))]
        scaled = self.config.batch.scaled_decode
        images = run_views(self.recipes, data, rngs, seeder, self.dest, scaled=scaled, where=where)
        for v, img in enumerate(images):
            self.check_image(img, where, v)
        return images, None


__all__ = ["ViewsKind"]
