"""Recipes and decoding (loaders/recipe/, loaders/device.py): fused heads, library recipes, kernels,
resize, partial and scaled JPEG decode, device decode, channels_last, schedules and views."""
