"""``Clips``: what one training or evaluation sample of a video is.

``make_loader(src, clips=Clips(frames=16, stride=2))`` turns every video sample into a clip of
``frames`` frames, ``stride`` frames apart (or ``fps`` frames a second, whatever the video's own
rate), placed in the video by ``sampling``:

- ``"random"`` (training's default): a start drawn uniformly, seeded per (seed, epoch, key,
  occurrence) like every other draw;
- ``"uniform"`` (evaluation's default): ``clips_per_video`` clips spread evenly from the first
  possible start to the last (one clip: the middle one), the same every epoch;
- ``"segments"`` (TSN): the video cut into ``frames`` equal segments and one frame taken from
  each, at a random place in training and the middle in evaluation (``stride``/``fps`` unused).

``clips_per_video=k`` makes each epoch hold every video ``k`` times, each its own clip (the
``k`` uniform clips in evaluation: all of a video's clips, each exactly once with
``uneven="mask"``). A video shorter than a clip follows ``short``: ``"repeat_last"`` (its last
frame fills the clip; TorchCodec's default policy), ``"loop"`` (from its first frame again;
TorchCodec's ``"wrap"``) or ``"pad"`` (black frames, and the batch's ``frame_mask`` says which
frames are real). ``layout`` is the batch's ``video``: ``"TCHW"`` ([B,T,3,H,W]) or ``"CTHW"``
([B,3,T,H,W], what 3D CNNs take). ``audio=16000`` adds the clip's sound, resampled to that
rate with ``audio_channels`` channels, as ``audio`` [B,C,L] padded to the longest, with
``audio_lengths`` and ``audio_mask``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from loaders.plan import as_enum
from wdstool.base.errors import ConfigError


class Sampling(StrEnum):
    RANDOM = "random"
    UNIFORM = "uniform"
    SEGMENTS = "segments"


class Short(StrEnum):
    REPEAT_LAST = "repeat_last"
    LOOP = "loop"
    PAD = "pad"


class Layout(StrEnum):
    TCHW = "TCHW"
    CTHW = "CTHW"


@dataclass(frozen=True, kw_only=True)
class Clips:
    """A clip of every video sample (see the module's docstring)."""

    frames: int = 16
    stride: int | None = None  # frames between a clip's frames (default 1)
    fps: float | None = None  # or: frames a second, whatever the video's rate
    clips_per_video: int = 1
    sampling: Sampling | None = None  # None: "random" when training, "uniform" for evaluation
    short: Short = Short.REPEAT_LAST
    layout: Layout = Layout.TCHW
    audio: int | None = None  # sample rate of the clip's audio (None: no audio)
    audio_channels: int = 1

    def __post_init__(self) -> None:
        def positive_int(name: str, value: object) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"Clips: {name} must be an int >= 1, got {value!r}")

        positive_int("frames", self.frames)
        positive_int("clips_per_video", self.clips_per_video)
        if self.stride is not None:
            positive_int("stride", self.stride)
        if self.stride is not None and self.fps is not None:
            raise ConfigError(
                "Clips: give stride (frames apart) or fps (frames a second), not both"
            )
        if self.fps is not None and (
            isinstance(self.fps, bool) or not isinstance(self.fps, int | float) or self.fps <= 0
        ):
            raise ConfigError(f"Clips: fps must be a positive number, got {self.fps!r}")
        if self.sampling is not None:
            object.__setattr__(self, "sampling", as_enum(Sampling, "sampling", self.sampling))
        object.__setattr__(self, "short", as_enum(Short, "short", self.short))
        layout = self.layout.upper() if isinstance(self.layout, str) else self.layout
        object.__setattr__(self, "layout", as_enum(Layout, "layout", layout))
        if self.audio is not None:
            positive_int("audio", self.audio)
        if self.audio_channels not in (1, 2):
            raise ConfigError(f"Clips: audio_channels is 1 or 2, got {self.audio_channels!r}")

    def sampling_for(self, train: bool) -> Sampling:
        """The sampling in effect: the one given, else random when training, uniform not."""
        if self.sampling is not None:
            return self.sampling  # type: ignore[return-value]
        return Sampling.RANDOM if train else Sampling.UNIFORM

    def describe(self, train: bool) -> str:
        step = f"{self.fps:g} fps" if self.fps is not None else f"stride {self.stride or 1}"
        per = f", {self.clips_per_video} per video" if self.clips_per_video > 1 else ""
        audio = f", audio {self.audio} Hz x{self.audio_channels}" if self.audio else ""
        return (
            f"clips of {self.frames} frames, {step}, {self.sampling_for(train).value}{per}, "
            f"short videos: {self.short.value}, {self.layout.value}{audio}"
        )


__all__ = ["Clips", "Layout", "Sampling", "Short"]
