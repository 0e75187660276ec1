"""A LLaVA-style model's inputs: a fixed-size vision encoder (CLIP or SigLIP at 224, 336, 384)
whose processor resizes the shortest side, crops the center and normalizes, and whose language
model takes a fixed number of placeholder tokens an image.

In the workers each decoded image goes through the processor's own ``resize`` and
``center_crop`` (its methods, on the uint8 image: the processor's pixels), and crosses as uint8
``[3, S, S]``; on the device :meth:`Llava.model_inputs` normalizes them as the processor does:
``pixel_values`` ``[N, 3, S, S]`` float32, equal to the processor's on the same file. Positions
restart at each packed sample (``position_ids`` [B, L]), from which transformers builds the
mask that keeps attention inside each sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from loaders.families.processors import image_processor, normalizer
from wdstool.base.errors import ConfigError
from wdstool.format.decode import decode_hwc
from wdstool.format.images import MAX_PIXELS


@dataclass(frozen=True, eq=False)
class Llava:
    """A fixed-size encoder's processor (a transformers ``CLIPImageProcessor``,
    ``LlavaImageProcessor``, ``SiglipImageProcessor``, or their saved folder) and the
    placeholder tokens an image takes (``image_tokens``: the model's ``image_seq_length``, e.g.
    576 for a 336-pixel CLIP with 14-pixel patches)."""

    processor: Any
    image_tokens: int

    name = "llava"
    positions_key = ""

    @classmethod
    def from_processor(cls, given: Any, image_tokens: int | None = None) -> Llava:
        """``image_tokens`` defaults to the processor's ``image_seq_length`` where it has one
        (a LLaVA processor), else (crop / 14)**2."""
        seq = getattr(given, "num_image_tokens", None) or getattr(given, "image_seq_length", None)
        p = image_processor(given, "Llava")
        crop = dict(getattr(p, "crop_size", None) or {})
        side = crop.get("height") or dict(p.size or {}).get("height")
        if side is None:
            raise ConfigError("Llava: the processor names no crop_size (a fixed-size encoder's)")
        n = image_tokens or seq or (int(side) // 14) ** 2
        return cls(p, int(n))

    def __post_init__(self) -> None:
        n = self.image_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"Llava: image_tokens must be an int >= 1, got {n!r}")

    @property
    def side(self) -> int:
        crop = dict(self.processor.crop_size or {})
        return int(crop.get("height") or self.processor.size["height"])

    # --- in the workers ------------------------------------------------------------------
    def tokens(self, height: int, width: int) -> int:
        return self.image_tokens

    def image(self, data: bytes, where: str) -> torch.Tensor:
        """One image's bytes -> uint8 [3, S, S] as the processor resizes and crops it."""
        from transformers.image_utils import SizeDict

        p = self.processor
        img = decode_hwc(data, max_pixels=MAX_PIXELS, where=where)[None]  # [1,3,h,w] strided
        if getattr(p, "do_resize", True):
            img = p.resize(img.contiguous(), size=SizeDict(**dict(p.size)), resample=p.resample)
        if getattr(p, "do_center_crop", True):
            img = p.center_crop(img, SizeDict(**dict(p.crop_size)))
        return img[0]

    def into(self, dst: torch.Tensor, image: torch.Tensor) -> None:
        dst.view(image.shape).copy_(image)

    # --- on the device ---------------------------------------------------------------------
    def model_inputs(
        self, batch: dict[str, Any], device: Any, image_token_id: int
    ) -> dict[str, Any]:
        """What ``LlavaForConditionalGeneration(**inputs)`` takes, on ``device``: input_ids,
        labels (where the batch has them), position_ids [B,L] and pixel_values (normalized
        here, [N, 3, S, S])."""
        out = {
            "input_ids": batch["input_ids"].to(device, non_blocking=True),
            "position_ids": batch["position_ids"].to(device, non_blocking=True),
            # transformers keeps attention inside each packed sample only without a cache
            "use_cache": False,
        }
        if "labels" in batch:
            out["labels"] = batch["labels"].to(device, non_blocking=True)
        n = len(batch["image_sizes"])
        if n:
            p, s = self.processor, self.side
            flat = batch["images"].to(device, non_blocking=True)
            mean, std = normalizer(
                tuple(p.image_mean), tuple(p.image_std), p.rescale_factor, flat.device
            )
            pixels = flat.view(n, 3, s, s).to(torch.float32)
            out["pixel_values"] = pixels.sub_(mean[:, None, None]).div_(std[:, None, None])
        return out


__all__ = ["Llava"]
