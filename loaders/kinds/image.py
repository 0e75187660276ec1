"""The plain kind: one image per sample through the recipe, batched as ``pixel_values``
[B,3,H,W] (uint8, or normalized float32; channels-last memory where asked)."""

from __future__ import annotations

import random
from typing import Any

from loaders.config import LoaderConfig
from loaders.kinds.base import image_part
from loaders.kinds.pixels import PixelKind
from loaders.read import Located
from loaders.recipe import Seeder


class ImageKind(PixelKind):
    name = "image"
    pixel_key = "pixel_values"
    keys = ("pixel_values",)

    @staticmethod
    def applies(config: LoaderConfig) -> bool:
        return True  # what a loader makes when no other kind applies (registered last)

    def decode(
        self, loc: Located, rng: random.Random, seeder: Seeder, where: str
    ) -> tuple[Any, dict[str, Any] | None]:
        data = image_part(loc)
        scaled = self.config.batch.scaled_decode
        img = self.recipes[0](data, rng, seeder, self.dest[0], scaled=scaled, where=where)  # type: ignore[arg-type]
        self.check_image(img, where, 0)
        return [img], None


__all__ = ["ImageKind"]
