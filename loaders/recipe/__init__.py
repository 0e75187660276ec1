"""Recipes: what turns a sample's encoded image into the tensors the model sees (DESIGN.md,
"Recipes"): a geometric head the decoder executes (``geometry``, ``region_decode``), a tail of pixel
ops run in the workers on the crop, seeded per sample (``seeding``), any torchvision v2
pipeline split into the two (``fuse``), put together in :class:`Recipe` (``recipe``);
``presets`` names the recipes people train with."""

from loaders.recipe.geometry import Geometry, Head, from_row, to_row
from loaders.recipe.probe import check_output
from loaders.recipe.recipe import DEFAULT_SIZE, Recipe, as_size, build_recipe
from loaders.recipe.seeding import Seeder, Where

__all__ = [
    "DEFAULT_SIZE",
    "Geometry",
    "Head",
    "Recipe",
    "Seeder",
    "Where",
    "as_size",
    "build_recipe",
    "check_output",
    "from_row",
    "to_row",
]
