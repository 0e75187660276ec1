"""Recipes: what turns a sample's encoded image into the tensors the model sees (DESIGN.md,
"Recipes"). ``presets`` names the recipes people train with, as torchvision v2 pipelines."""
