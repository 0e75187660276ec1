"""Faster, bit-identical uint8 kernels for two torchvision v2 ops that augmentation recipes run.

RandAugment and TrivialAugmentWide pick among 14 ops; two of them cost far more than the rest on
a 224 px uint8 crop (one thread, this project's 2-core machine): ``adjust_sharpness`` 3.4 ms (a
grouped float ``conv2d``) and ``solarize`` 0.73 ms (``torch.where`` on uint8), against ~0.2 ms for
a colour op. The kernels here compute the same outputs for uint8 CPU images, bit for bit
(``tests/loaders/recipe/test_kernels.py`` checks them against torchvision's over random and extreme
images), in 0.55 and ~0.1 ms:

- sharpness: torchvision blurs with the kernel [[1,1,1],[1,5,1],[1,1,1]] / 13 in float32 and
  rounds. For integer pixels the exact blur is k/13 (k an integer), never a half-integer (13 is
  odd), so it lies at least 1/26 from a rounding boundary, far beyond float32's error on values
  up to 255: the rounded blur is exactly floor((2k + 13) / 26), computed here in int16. The blend
  that follows is torchvision's own code on the same float32 tensors.
- solarize: the same comparison, and ``~x`` written as ``x ^ 255`` where the mask is set.

:func:`install` puts them into torchvision's kernel registry for plain tensors and
``tv_tensors.Image`` (process-wide, once; the recipe's tail calls it), so the user's own v2
transforms (``RandomAdjustSharpness``, ``RandomSolarize``, the auto-augment policies) run them
unchanged. Any other input (float, another device, a shape the stock kernel rejects) goes to the
stock kernel. The registry is torchvision's private ``_KERNEL_REGISTRY``: when it is not there or
holds something else than the stock kernels this module knows, nothing is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as F

try:
    from torchvision.transforms.v2.functional import _color
    from torchvision.transforms.v2.functional._utils import (
        _KERNEL_REGISTRY,
        _kernel_tv_tensor_wrapper,
    )
except ImportError:  # another torchvision layout: keep its kernels
    _KERNEL_REGISTRY = None

_installed = False


def _plain_uint8(image: torch.Tensor) -> bool:
    return image.dtype == torch.uint8 and image.device.type == "cpu" and image.ndim >= 3


def blur13(image: torch.Tensor) -> torch.Tensor:
    """The interior (H-2, W-2) of torchvision's sharpness blur of a uint8 image, rounded, as
    uint8: floor((2k + 13) / 26) with k = 5 x + the 8 neighbours (k <= 3315 fits int16)."""
    v = image.to(torch.int16)
    h, w = v.shape[-2] - 2, v.shape[-1] - 2
    k = v[..., 1 : 1 + h, 1 : 1 + w] * 5
    for dy in range(3):
        for dx in range(3):
            if dy != 1 or dx != 1:
                k += v[..., dy : dy + h, dx : dx + w]
    return k.mul_(2).add_(13).div_(26, rounding_mode="floor").to(torch.uint8)


def adjust_sharpness_uint8(image: torch.Tensor, sharpness_factor: float) -> torch.Tensor:
    """torchvision's ``adjust_sharpness_image``, its blur computed exactly in integers."""
    if not _plain_uint8(image):
        return _color.adjust_sharpness_image(image, sharpness_factor)
    num_channels, height, width = image.shape[-3:]
    if (
        num_channels not in (1, 3)
        or sharpness_factor < 0
        or image.numel() == 0
        or height <= 2
        or width <= 2
    ):
        return _color.adjust_sharpness_image(image, sharpness_factor)  # its errors, its no-ops
    output = image.to(dtype=torch.float32, copy=True)
    blurred = blur13(image).to(torch.float32)
    view = output[..., 1:-1, 1:-1]
    view.add_(blurred.sub_(view), alpha=(1.0 - sharpness_factor))  # as torchvision blends
    return output.clamp_(0, 255).to(torch.uint8)


def solarize_uint8(image: torch.Tensor, threshold: float) -> torch.Tensor:
    """torchvision's ``solarize_image``: pixels >= threshold inverted (x ^ 255 on uint8)."""
    if not _plain_uint8(image) or threshold > 255:
        return _color.solarize_image(image, threshold)
    flip = (image >= threshold).view(torch.uint8).mul_(255)
    return image.bitwise_xor(flip)


_FAST: dict[Any, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {}
if _KERNEL_REGISTRY is not None:
    _FAST = {
        F.adjust_sharpness: (_color.adjust_sharpness_image, adjust_sharpness_uint8),
        F.solarize: (_color.solarize_image, solarize_uint8),
    }


def install() -> bool:
    """Put the fast kernels into torchvision's registry (once per process). True when they are
    there; False when this torchvision's registry is not the one they were written for."""
    global _installed
    if _installed or _KERNEL_REGISTRY is None:
        return _installed
    for functional, (stock, _fast) in _FAST.items():
        registry = _KERNEL_REGISTRY.get(functional, {})
        plain, image = registry.get(torch.Tensor), registry.get(tv_tensors.Image)
        if plain is not stock or getattr(image, "__wrapped__", None) is not stock:
            return False
    for functional, (_stock, fast) in _FAST.items():
        registry = _KERNEL_REGISTRY[functional]
        registry[torch.Tensor] = fast
        registry[tv_tensors.Image] = _kernel_tv_tensor_wrapper(fast)
    _installed = True
    return True


def uninstall() -> None:
    """Give torchvision its stock kernels back (tests; a baseline that must run stock ops)."""
    global _installed
    if not _installed:
        return
    for functional, (stock, _fast) in _FAST.items():
        registry = _KERNEL_REGISTRY[functional]
        registry[torch.Tensor] = stock
        registry[tv_tensors.Image] = _kernel_tv_tensor_wrapper(stock)
    _installed = False
