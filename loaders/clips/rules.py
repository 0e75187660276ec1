"""What a clips loader settles and refuses at ``make_loader`` (one-line ConfigErrors before
any worker): its output, how many times an epoch holds each video, its sources' schema, and
the padding of its audio."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from loaders.clips.clip_options import Clips
from loaders.schema import Pad
from wdstool.base.errors import ConfigError


def clip_output(
    clips: Any, *, views: Any, output: str, channels_last: bool, repeats: int
) -> tuple[str, int]:
    """A clips loader's ``output`` (uint8) and ``repeats`` (one per clip of a video)."""
    if not isinstance(clips, Clips):
        raise ConfigError(f"clips={clips!r}: give a loaders.Clips(frames=..., ...)")
    if views is not None:
        raise ConfigError("clips and views: multi-crop views of clips are not supported")
    if output not in ("auto", "uint8"):
        raise ConfigError(
            f"clips with output={output!r}: clips are uint8 ([B,T,3,H,W] is large in float); "
            "normalize on the device (loaders.normalize)"
        )
    if channels_last:
        raise ConfigError("clips and channels_last: clips are laid out by Clips(layout=...)")
    if clips.clips_per_video > 1:
        if repeats not in (1, clips.clips_per_video):
            raise ConfigError(
                f"repeats={repeats} and Clips(clips_per_video={clips.clips_per_video}): "
                "a clips loader repeats each video once per clip; give one of them"
            )
        repeats = clips.clips_per_video
    return "uint8", repeats


def clip_sources(clips: Clips, sources: Sequence[Any]) -> list[Any]:
    """The loader's sources (``loaders.dataset.LoaderSource``) reading video members too."""
    return [replace(s, schema=replace(s.schema, videos=True)) for s in sources]


def clip_epoch_size(clips: Clips, epoch_size: int | None, samples: int) -> int | None:
    """Every video once per clip, where no ``epoch_size`` was given."""
    if clips.clips_per_video > 1 and epoch_size is None:
        return clips.clips_per_video * samples
    return epoch_size


def clip_pads(clips: Clips, pads: tuple[tuple[str, Pad], ...]) -> tuple[tuple[str, Pad], ...]:
    """The audio of clips, batched padded to the longest (unless the user padded it)."""
    if clips.audio is None or "audio" in dict(pads):
        return pads
    return (*pads, ("audio", Pad(0.0, dim=-1)))


__all__ = ["clip_epoch_size", "clip_output", "clip_pads", "clip_sources"]
