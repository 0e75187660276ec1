"""Video clips (``make_loader(clips=Clips(...))``): every sample becomes a clip of its video
(or its image, still) through ``loaders.clips.ClipRecipe``, batched as ``video`` uint8
[B,T,3,H,W] (or [B,3,T,H,W]), with the clip's span, number, frame mask and audio as fields."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from loaders.clips import ClipRecipe, Clips, Layout, as_clip_fields, clip_batch_keys
from loaders.clips.rules import clip_epoch_size, clip_output, clip_pads, clip_sources
from loaders.config import LoaderConfig
from loaders.kinds.pixels import PixelKind
from loaders.pool import Layout as Strides
from loaders.read import Located
from loaders.recipe import Recipe, Seeder


class ClipKind(PixelKind):
    name = "clip"
    pixel_key = "video"
    keys = (
        "video",
        "clip_span",
        "clip_index",
        "frame_mask",
        "audio",
        "audio_lengths",
        "audio_mask",
    )
    settings = Clips
    adds_fields = True  # the clip's span, number, frame mask, audio

    def __init__(self, config: LoaderConfig, recipes: tuple[Recipe, ...]) -> None:
        super().__init__(config, recipes)
        self.clips: Clips = config.sample  # type: ignore[assignment]
        self.recipe = ClipRecipe(self.clips, recipes[0], config.recipes.train)
        self.cthw = self.clips.layout is Layout.CTHW

    @staticmethod
    def applies(config: LoaderConfig) -> bool:
        return isinstance(config.sample, Clips)

    @classmethod
    def arguments(
        cls, settings: Any, *, views: Any, output: str, channels_last: bool, repeats: int
    ) -> tuple[str, int]:
        return clip_output(
            settings, views=views, output=output, channels_last=channels_last, repeats=repeats
        )

    @classmethod
    def settle(cls, sources: Sequence[Any], config: LoaderConfig) -> tuple[list[Any], LoaderConfig]:
        """Video members read, every video once per clip, the audio padded
        (``loaders.clips.rules``); the spatial recipe's rules checked at the first epoch's
        size."""
        clips: Clips = config.sample
        samples = sum(sum(s.index.sizes) for s in sources)
        config = replace(
            config,
            epoch_size=clip_epoch_size(clips, config.epoch_size, samples),
            pads=clip_pads(clips, config.pads),
        )
        ClipRecipe(clips, config.recipes.at(0)[0], config.recipes.train)
        return clip_sources(clips, sources), config

    @classmethod
    def describe(cls, config: LoaderConfig) -> str:
        return config.sample.describe(config.recipes.train)  # type: ignore[no-any-return]

    @classmethod
    def batch_keys(cls, config: LoaderConfig) -> tuple[str, ...]:
        return ("video", *clip_batch_keys(config.sample))

    @classmethod
    def layout(cls, config: LoaderConfig, n: int, size: Any) -> Strides:
        """[n,T,3,h,w], or [n,3,T,h,w] for ``layout="CTHW"``."""
        frames = config.sample.frames
        h, w = (size, size) if isinstance(size, int) else size
        if config.sample.layout is Layout.CTHW:
            return (n, 3, frames, h, w), (3 * frames * h * w, frames * h * w, h * w, w, 1)
        return (n, frames, 3, h, w), (3 * frames * h * w, 3 * h * w, h * w, w, 1)

    def row(self, batch: torch.Tensor, i: int) -> torch.Tensor:
        """A clip [T,3,h,w]: for CTHW, a view of a [3,T,h,w] row."""
        return batch[i].transpose(0, 1) if self.cthw else batch[i]

    def decode(
        self, loc: Located, rng: random.Random, seeder: Seeder, where: str
    ) -> tuple[Any, dict[str, Any] | None]:
        clip = loc.rep % self.clips.clips_per_video
        got = self.recipe.sample(loc.sample, loc.url, rng, seeder, self.dest[0], clip)
        return [got.video], as_clip_fields(got, clip, self.clips)


__all__ = ["ClipKind"]
