"""One video sample -> one clip tensor: frames drawn, only those decoded, one geometry for all.

:class:`ClipRecipe` is the clip's recipe (DESIGN.md, "Video"): the plan gave the video and its
occurrence (``clip``), this draws the clip's frames (``loaders.clips.sampling``) and the
spatial head's parameters once per clip from the sample's generator, decodes only those frames
(``wdstool.format.clipdecode``: from the keyframe before the first, forward to the last),
crops and resizes every frame the same way straight into the batch slot, and runs the tail
once on the whole clip, a [T,3,H,W] tensor (torchvision's v2 ops draw their parameters once
per call, so every frame gets the same ColorJitter, the same erasing box). An image
sample of a mixed epoch becomes a still clip: the image's recipe, repeated over the frames.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, NamedTuple

import torch

from loaders.clips.clip_options import Clips, Short
from loaders.clips.sampling import draw_clip
from loaders.clips.video_members import media_part, video_facts
from loaders.recipe import Head, Recipe, Seeder
from loaders.recipe.region_decode import apply_frames
from wdstool.base import counters
from wdstool.base.errors import ConfigError, SampleError
from wdstool.format.clipdecode import open_video
from wdstool.format.video import VideoInfo


class ClipOut(NamedTuple):
    """A sample's clip: ``video`` [T,3,H,W] uint8 (``out`` itself where given), the first
    frame's time and the end of the last one's in seconds, which frames are real, the audio
    of the span ([C,L] float32; None without ``Clips.audio``), the frame indices decoded."""

    video: torch.Tensor
    span: tuple[float, float]
    real: tuple[bool, ...]
    audio: torch.Tensor | None
    indices: tuple[int, ...]


@dataclass(frozen=True)
class ClipRecipe:
    """``clips`` drawn and decoded, then ``recipe``'s head and tail on every frame."""

    clips: Clips
    recipe: Recipe
    train: bool = True

    def __post_init__(self) -> None:
        r = self.recipe
        if r.head is not None and not isinstance(r.head, Head):
            raise ConfigError(
                f"clips: the spatial recipe must be a torchvision v2 pipeline (or the built-in "
                f"one); {r.library}'s pipelines draw per image, not once per clip"
            )
        if r.size is None:
            raise ConfigError(
                "clips need one output size for every frame: start the transform with a crop "
                f"or a resize to a fixed size ({r.describe()})"
            )
        if r.dtype not in (torch.uint8, None):
            raise ConfigError(
                "clips are uint8: end the transform at uint8 and normalize on the device "
                "(loaders.normalize works on [B,T,3,H,W] batches too)"
            )

    @cached_property
    def _head_only(self) -> Recipe:
        """The recipe's head alone, for still clips (its tail runs on the whole clip)."""
        return replace(self.recipe, tail=())

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """[T,3,H,W] of one clip."""
        h, w = self.recipe.size  # type: ignore[misc]
        return (self.clips.frames, 3, h, w)

    def sample(
        self,
        sample: Any,
        url: str,
        rng: random.Random,
        seeder: Seeder,
        out: torch.Tensor | None,
        clip: int = 0,
    ) -> ClipOut:
        """The clip of a sample (a ``wdstool.format.tar_read.Sample``): its video's, or its
        image as a still clip; SampleError naming it when the transform's output is not a
        clip of the batch's shape."""
        where = f"{url}: sample {sample.key!r}"
        data, is_video = media_part(sample, url)
        if is_video:
            facts = video_facts(sample)
            got = self.video(data, facts, rng, seeder, out, clip=clip, where=where)
        else:
            got = self.still(data, rng, seeder, out, where=where)
        if got.video is not out:
            want = (torch.uint8, *self.shape)
            have = (got.video.dtype, *got.video.shape)
            if have != want:
                raise SampleError(
                    f"{where}: the clip's transform returned {list(have[1:])} {have[0]} where "
                    f"clips are {list(want[1:])} {want[0]}; a batch needs one size and dtype"
                )
        return got

    def video(
        self,
        data: bytes | memoryview,
        facts: VideoInfo | None,
        rng: random.Random,
        seeder: Seeder,
        out: torch.Tensor | None,
        *,
        clip: int = 0,
        where: str = "",
    ) -> ClipOut:
        """The clip of a video member (``facts``: its probed facts from ``KEY.json``)."""
        opened = counters.timed("decode", lambda: open_video(data, info=facts, where=where))
        info = opened.info
        draw = draw_clip(self.clips, info.frames, info.fps, rng, clip=clip, train=self.train)
        decoded = counters.timed("decode", opened.frames, draw.indices)
        frames = decoded.frames.permute(0, 3, 1, 2)  # [T,3,H,W], channels-last memory
        head = self.recipe.head
        if out is None:
            out = torch.empty(self.shape, dtype=torch.uint8)
        if head is None:
            out.copy_(frames)
        else:
            g = head.draw(frames.shape[-2], frames.shape[-1], rng)
            counters.timed("resize", apply_frames, frames, g, out)
        if not all(draw.real):
            out[torch.tensor([not r for r in draw.real])] = 0
        video = self._tail(out, rng, seeder)
        secs = decoded.seconds
        span = (secs[0], secs[-1] + 1.0 / info.fps)
        audio = None
        if self.clips.audio is not None:
            audio = opened.audio(span[0], span[1], self.clips.audio, self.clips.audio_channels)
        return ClipOut(video, span, draw.real, audio, draw.indices)

    def still(
        self,
        data: bytes | memoryview,
        rng: random.Random,
        seeder: Seeder,
        out: torch.Tensor | None,
        *,
        where: str = "",
    ) -> ClipOut:
        """An image as a still clip: the image recipe's head once, the frame repeated, the
        tail on the whole clip."""
        if out is None:
            out = torch.empty(self.shape, dtype=torch.uint8)
        first = self._head_only(data, rng, seeder, out[0], where=where)
        if first is not out[0]:
            out[0].copy_(first)
        out[1:] = out[0]
        video = self._tail(out, rng, seeder)
        audio = None
        if self.clips.audio is not None:
            audio = torch.zeros(self.clips.audio_channels, 0)
        n = self.clips.frames
        return ClipOut(video, (0.0, 0.0), (True,) * n, audio, (0,) * n)

    def _tail(self, clip: torch.Tensor, rng: random.Random, seeder: Seeder) -> torch.Tensor:
        if not self.recipe.tail:
            return clip
        # a plain [T,3,H,W] tensor: v2 ops take it as a batch of images and draw once per call
        # (as a tv_tensors.Video some ops, Grayscale among them, would pass it through)
        return self.recipe.finish(clip, rng, seeder)


def clip_batch_keys(clips: Clips) -> tuple[str, ...]:
    """The batch keys a clips loader adds besides ``video``, ``labels``, ``keys``."""
    keys = ["clip_span", "clip_index"]
    if clips.short is Short.PAD:
        keys.append("frame_mask")
    if clips.audio is not None:
        keys += ["audio", "audio_lengths", "audio_mask"]
    return tuple(keys)


def as_clip_fields(got: ClipOut, clip: int, clips: Clips) -> dict[str, Any]:
    """What a clip adds to its sample's fields (collated by the batch's field rows)."""
    fields: dict[str, Any] = {
        "clip_span": torch.tensor(got.span, dtype=torch.float64),
        "clip_index": torch.tensor(clip, dtype=torch.int64),
    }
    if clips.short is Short.PAD:
        fields["frame_mask"] = torch.tensor(got.real, dtype=torch.bool)
    if got.audio is not None:
        fields["audio"] = got.audio
    return fields


__all__ = ["ClipOut", "ClipRecipe", "as_clip_fields", "clip_batch_keys"]
