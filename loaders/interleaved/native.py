"""Images near their native resolution: a pixel budget, sides multiples of a patch size, the
aspect ratio kept (the rule of Qwen2-VL's image processor, ``smart_resize``).

:class:`NativeResolution` sizes each image from its header alone, then decodes it and resizes it
to that size. By default the pixels are exactly those of decoding the whole image and resizing
it (``torchvision.transforms.v2.functional.resize``, antialiased); ``scaled=True`` lets a JPEG
more than twice the output on both sides be decoded at 1/2, 1/4 or 1/8 scale in the DCT domain
first (several times less work on large images, slightly different pixels there), as the
loader's ``scaled_decode`` does for crops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wdstool.base.errors import ConfigError, SampleError
from wdstool.format.decode import decode_crop, decode_hwc, header_size, scale_for
from wdstool.format.images import MAX_PIXELS, is_jpeg

MAX_ASPECT = 200  # Qwen2-VL refuses images more elongated than this


@dataclass(frozen=True, kw_only=True)
class NativeResolution:
    """Each image resized to about its own size: at least ``min_pixels`` and at most
    ``max_pixels`` pixels, each side a multiple of ``patch`` (Qwen2-VL: 28, its 14-pixel
    patches merged 2x2), the aspect ratio kept as closely as that allows. ``interpolation``:
    ``"bicubic"`` (what Qwen2-VL's processor uses) or ``"bilinear"``."""

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    patch: int = 28
    interpolation: str = "bicubic"
    scaled: bool = False

    def __post_init__(self) -> None:
        for name in ("min_pixels", "max_pixels", "patch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"NativeResolution: {name} must be an int >= 1, got {v!r}")
        if self.min_pixels > self.max_pixels:
            raise ConfigError(
                f"NativeResolution: min_pixels={self.min_pixels} is above "
                f"max_pixels={self.max_pixels}"
            )
        if self.max_pixels < self.patch * self.patch:
            raise ConfigError(
                f"NativeResolution: max_pixels={self.max_pixels} holds no {self.patch}x"
                f"{self.patch} patch"
            )
        if self.interpolation not in ("bicubic", "bilinear"):
            raise ConfigError(
                f"NativeResolution: interpolation is 'bicubic' or 'bilinear', got "
                f"{self.interpolation!r}"
            )

    def size(self, height: int, width: int, where: str = "") -> tuple[int, int]:
        """The output (height, width) of a ``height`` x ``width`` image."""
        if max(height, width) > MAX_ASPECT * min(height, width):
            raise SampleError(
                f"{where}: a {width}x{height} image is more than {MAX_ASPECT} times longer "
                "than wide"
            )
        f = self.patch
        h = max(f, round(height / f) * f)
        w = max(f, round(width / f) * f)
        if h * w > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h = max(f, math.floor(height / beta / f) * f)
            w = max(f, math.floor(width / beta / f) * f)
        elif h * w < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h = math.ceil(height * beta / f) * f
            w = math.ceil(width * beta / f) * f
        return h, w

    def __call__(self, data: bytes, where: str = "") -> torch.Tensor:
        """One image's bytes -> uint8 [3,h,w] at :meth:`size` (contiguous)."""
        return self.strided(data, where).contiguous()

    def strided(self, data: bytes, where: str = "") -> torch.Tensor:
        """As calling it, but the [3,h,w] tensor keeps the layout the decoder or the resize
        gave it (height-width-channel in memory, most often): the loader copies it once, into
        the batch's flat buffer, where a contiguous copy first would be a second pass."""
        from torchvision.transforms.v2 import InterpolationMode
        from torchvision.transforms.v2.functional import resize

        width, height = header_size(data, max_pixels=MAX_PIXELS, where=where)
        h, w = self.size(height, width, where)
        img = None
        if self.scaled and is_jpeg(data):
            scale = scale_for(height, width, (h, w))
            if scale > 1:
                img = decode_crop(data, 0, 0, height, width, scale=scale)
        if img is None:
            img = decode_hwc(data, max_pixels=MAX_PIXELS, where=where)
        if tuple(img.shape[-2:]) == (h, w):
            return img
        mode = (
            InterpolationMode.BICUBIC
            if self.interpolation == "bicubic"
            else InterpolationMode.BILINEAR
        )
        return resize(img, [h, w], interpolation=mode, antialias=True)


__all__ = ["NativeResolution"]
