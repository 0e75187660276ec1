"""What a family takes from a transformers image processor: the object, or the folder it was
saved to (``preprocessor_config.json``, read with local files only), and the normalization it
runs, as it runs it (on the device here)."""

from __future__ import annotations

import os
from typing import Any

import torch

from wdstool.base.errors import ConfigError


def image_processor(given: Any, kind: str) -> Any:
    """The image processor of ``given``: a transformers image processor, a processor holding
    one (``.image_processor``), or a folder saved with ``save_pretrained``."""
    if isinstance(given, str | os.PathLike):
        path = os.fspath(given)
        if not os.path.isdir(path):
            raise ConfigError(f"{kind}: {path} is not a folder of a saved processor")
        try:
            from transformers import AutoImageProcessor

            given = AutoImageProcessor.from_pretrained(path, local_files_only=True)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ConfigError(f"{kind}: {path} holds no image processor ({first})") from None
    given = getattr(given, "image_processor", given)
    if not hasattr(given, "image_mean") or not hasattr(given, "image_std"):
        raise ConfigError(f"{kind}: {type(given).__name__} is not a transformers image processor")
    return given


def normalizer(mean: tuple[float, ...], std: tuple[float, ...], rescale: float, device: Any):
    """The processor's fused rescale and normalize: ``(x - mean/rescale) / (std/rescale)`` in
    float32, with the constants made as transformers makes them (so the values are its own)."""
    m = torch.tensor(mean, device=device) * (1.0 / rescale)
    s = torch.tensor(std, device=device) * (1.0 / rescale)
    return m, s


__all__ = ["image_processor", "normalizer"]
