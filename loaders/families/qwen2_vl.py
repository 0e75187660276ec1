"""Qwen2-VL's inputs (the image path of Qwen2.5-VL and Qwen3-VL is the same): what its processor
and ``get_rope_index`` compute, built in the loader's workers.

- **Pixels.** Each image at the processor's ``smart_resize`` size (sides multiples of
  ``patch_size * merge_size``, a pixel budget: :class:`loaders.NativeResolution` with the
  processor's ``min_pixels``/``max_pixels``, bicubic, antialiased: the processor's own resize
  of the decoded uint8 image), laid out in the worker as the processor's patches: for each
  ``merge_size x merge_size`` block of ``patch_size`` patches, in row-major order, each patch
  channel by channel (``[patches, 3, 14, 14]`` uint8, a quarter of float32's bytes and half the
  processor's, whose temporal patch repeats each frame). On the device
  :meth:`Qwen2VL.model_inputs` normalizes them as the processor does (``(x - 255 mean) /
  (255 std)``, float32) and repeats them over ``temporal_patch_size``: ``pixel_values``
  ``[patches, 3 * 2 * 14 * 14]``, equal to the processor's on the same file.
- **Grids and placeholders.** ``image_grid_thw`` is ``(1, h / 14, w / 14)`` an image; it takes
  ``h * w / (14 * 14 * merge_size**2)`` placeholder tokens.
- **Positions.** The 3-D rotary positions of each packed sample (or piece of one), computed
  alone as the model's ``get_rope_index`` computes a sequence (text: one position a token, the
  same on the three rows; an image: its start, then its merged grid's row and column), laid out
  per row (the batch's ``mrope_position_ids``, [B, 3, L]) beside the text positions that
  restart at each sample: ``model_inputs``'s
  ``position_ids`` is ``[4, B, L]`` (row 0 the text positions, from which transformers builds
  the mask that keeps attention inside each sample; rows 1-3 the rotary ones).
  ``mm_token_type_ids`` is 1 on the image placeholders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from loaders.families.processors import image_processor, normalizer
from loaders.interleaved.native import NativeResolution
from loaders.kinds.interleaved import to_patches
from wdstool.base.errors import ConfigError

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True, kw_only=True)
class Qwen2VL:
    """Qwen2-VL's image settings (its processor's defaults; :meth:`from_processor` reads
    yours)."""

    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    image_mean: tuple[float, ...] = CLIP_MEAN
    image_std: tuple[float, ...] = CLIP_STD
    rescale_factor: float = 1 / 255

    name = "qwen2-vl"
    positions_key = "mrope_position_ids"

    @classmethod
    def from_processor(cls, given: Any) -> Qwen2VL:
        """The settings of a Qwen2-VL image processor (or processor, or its saved folder)."""
        p = image_processor(given, "Qwen2VL")
        size = dict(getattr(p, "size", None) or {})
        lo = size.get("shortest_edge") or getattr(p, "min_pixels", None) or cls.min_pixels
        hi = size.get("longest_edge") or getattr(p, "max_pixels", None) or cls.max_pixels
        return cls(
            patch_size=int(p.patch_size),
            merge_size=int(p.merge_size),
            temporal_patch_size=int(p.temporal_patch_size),
            min_pixels=int(lo),
            max_pixels=int(hi),
            image_mean=tuple(float(v) for v in p.image_mean),
            image_std=tuple(float(v) for v in p.image_std),
            rescale_factor=float(p.rescale_factor),
        )

    def __post_init__(self) -> None:
        for name in ("patch_size", "merge_size", "temporal_patch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"Qwen2VL: {name} must be an int >= 1, got {v!r}")

    # --- in the workers ------------------------------------------------------------------
    @property
    def native(self) -> NativeResolution:
        """The processor's resize: ``smart_resize`` (factor ``patch * merge``), bicubic."""
        return NativeResolution(
            min_pixels=self.min_pixels,
            max_pixels=self.max_pixels,
            patch=self.patch_size * self.merge_size,
            interpolation="bicubic",
        )

    def tokens(self, height: int, width: int) -> int:
        """Placeholder tokens of an image of this (resized) size."""
        return (height // self.patch_size) * (width // self.patch_size) // self.merge_size**2

    def into(self, dst: torch.Tensor, image: torch.Tensor) -> None:
        """A uint8 [3,h,w] image into ``dst`` (flat) as its patches, in the processor's order.
        An image whose pixels lie interleaved (the decoder's, a channels-last resize's) goes
        through :mod:`loaders.kinds._planar` where it was compiled (one pass; torch's copy of
        the 7-d permuted view took a tenth of a worker's time)."""
        c, h, w = image.shape
        p, m = self.patch_size, self.merge_size
        hwc = image.permute(1, 2, 0)
        if to_patches is not None and c == 3 and hwc.is_contiguous() and dst.is_contiguous():
            to_patches(hwc.numpy(), dst.numpy(), w, p, m)
            return
        blocks = image.reshape(c, h // (p * m), m, p, w // (p * m), m, p)
        # [h/(pm), w/(pm), m, m, c, p, p]: merge block by merge block, patch by patch
        dst.view(h // (p * m), w // (p * m), m, m, c, p, p).copy_(
            blocks.permute(1, 4, 2, 5, 0, 3, 6)
        )

    def positions(
        self, ids: Sequence[int], runs: Sequence[tuple[int, int]], sizes: Sequence[tuple[int, int]]
    ) -> torch.Tensor:
        """The 3-D rotary positions [3, len(ids)] of one packed sample (or piece) alone:
        ``runs`` its kept images' placeholder runs (start, length) in it, ``sizes`` their
        (height, width), as ``get_rope_index`` lays out one sequence."""
        n = len(ids)
        out = torch.empty((3, n), dtype=torch.int64)
        pos = at = 0
        m = self.merge_size
        for (start, length), (h, w) in zip(runs, sizes, strict=True):
            text = start - at
            if text:
                out[:, at:start] = torch.arange(pos, pos + text)
                pos += text
            gh, gw = h // self.patch_size // m, w // self.patch_size // m
            assert gh * gw == length, (gh, gw, length)
            rows = torch.arange(gh).repeat_interleave(gw)
            cols = torch.arange(gw).repeat(gh)
            out[0, start : start + length] = pos
            out[1, start : start + length] = rows + pos
            out[2, start : start + length] = cols + pos
            pos += max(gh, gw)
            at = start + length
        if at < n:
            out[:, at:] = torch.arange(pos, pos + n - at)
        return out

    # --- on the device ---------------------------------------------------------------------
    def model_inputs(
        self, batch: dict[str, Any], device: Any, image_token_id: int
    ) -> dict[str, Any]:
        """What ``Qwen2VLForConditionalGeneration(**inputs)`` takes, on ``device``: input_ids,
        labels (where the batch has them), position_ids [4,B,L], mm_token_type_ids (1 where
        ``image_token_id``), pixel_values (normalized here) and image_grid_thw."""
        ids = batch["input_ids"].to(device, non_blocking=True)
        sizes = batch["image_sizes"]
        grid = torch.stack(
            [
                torch.ones_like(sizes[:, 0]),
                sizes[:, 0] // self.patch_size,
                sizes[:, 1] // self.patch_size,
            ],
            dim=1,
        )
        text = batch["position_ids"].to(device, non_blocking=True)
        rope = batch[self.positions_key].to(device, non_blocking=True)  # [B, 3, L]
        out = {
            "input_ids": ids,
            "position_ids": torch.cat([text[None], rope.permute(1, 0, 2)], dim=0),
            "mm_token_type_ids": (ids == image_token_id).to(torch.int32),
            # transformers keeps attention inside each packed sample only without a cache
            "use_cache": False,
        }
        if "labels" in batch:
            out["labels"] = batch["labels"].to(device, non_blocking=True)
        if len(sizes):
            flat = batch["images"].to(device, non_blocking=True)
            p, t = self.patch_size, self.temporal_patch_size
            mean, std = normalizer(
                self.image_mean, self.image_std, self.rescale_factor, flat.device
            )
            patches = flat.view(-1, 3, p, p).to(torch.float32)
            patches = patches.sub_(mean[:, None, None]).div_(std[:, None, None])
            out["pixel_values"] = (
                patches[:, :, None].expand(-1, -1, t, -1, -1).reshape(-1, 3 * t * p * p)
            )
            out["image_grid_thw"] = grid.to(device)
        return out


__all__ = ["Qwen2VL"]
