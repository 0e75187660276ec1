"""The device step of a recipe: normalization of uint8 batches where the model runs.

Normalization belongs on the training device: workers ship uint8 (a quarter of float32's bytes
between processes and to the GPU) and :func:`normalize` runs after the (non_blocking) copy.
:func:`normalize_into` is the same for a worker that must hand over float batches
(``output="float"`` with a uint8 recipe), into a reusable buffer.
"""

from __future__ import annotations

import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def normalize(
    x: torch.Tensor,
    mean: tuple[float, ...] = IMAGENET_MEAN,
    std: tuple[float, ...] = IMAGENET_STD,
    *,
    dtype: torch.dtype = torch.float32,
    dim: int = -3,
) -> torch.Tensor:
    """(x - 255*mean) / (255*std) for uint8 (or 0..255 float) images [..., 3, H, W], computed on
    x's device: call it after the (non_blocking) copy of a uint8 batch to the GPU. ``dim``: the
    channel dimension (-3: images and [B,T,3,H,W] clips; -4: [B,3,T,H,W] clips)."""
    if dim >= 0 or x.dim() < -dim or x.shape[dim] != 3:
        raise ValueError(f"normalize: dim={dim} of a {list(x.shape)} tensor is not 3 channels")
    shape = (3,) + (1,) * (-dim - 1)
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


__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "normalize", "normalize_into"]
