"""Which frames a clip takes: a pure function of the spec, the video's frame count and rate,
the sample's generator and its clip number (no I/O, no global RNG).

The draws are the recipe's, so they come from the sample's own ``random.Random`` (seeded per
(seed, epoch, key, occurrence) by the batch assembler): the same clip whatever the worker,
the worker count or a resume.
"""

from __future__ import annotations

import math
import random
from typing import NamedTuple

from loaders.clips.clip_options import Clips, Sampling, Short


class ClipDraw(NamedTuple):
    """A clip's frame indices into the video (``0..frames-1``, presentation order) and which of
    them are real frames (False: padding of a short video under ``short="pad"``)."""

    indices: tuple[int, ...]
    real: tuple[bool, ...]


def frame_step(clips: Clips, fps: float) -> float:
    """Frames of the video between two frames of a clip: ``stride``, or the video's rate over
    ``clips.fps`` (a 60 fps video sampled at 15 fps: 4)."""
    if clips.fps is not None:
        return fps / clips.fps if fps > 0 else 1.0
    return float(clips.stride or 1)


def offsets(clips: Clips, fps: float) -> tuple[int, ...]:
    """Each clip frame's position from the clip's first frame, in video frames."""
    step = frame_step(clips, fps)
    return tuple(round(k * step) for k in range(clips.frames))


def draw_clip(
    clips: Clips,
    num_frames: int,
    fps: float,
    rng: random.Random,
    *,
    clip: int = 0,
    train: bool = True,
) -> ClipDraw:
    """The frames of clip number ``clip`` (``0..clips_per_video-1``) of a video of
    ``num_frames`` frames at ``fps``; ``rng`` is the sample's generator (drawn from only when
    the sampling is random)."""
    n = max(1, int(num_frames))
    sampling = clips.sampling_for(train)
    if sampling is Sampling.SEGMENTS:
        return _segments(clips.frames, n, rng, train)
    rel = offsets(clips, fps)
    room = n - 1 - rel[-1]  # the last start at which the whole clip fits
    if room >= 0:
        if sampling is Sampling.RANDOM:
            start = rng.randint(0, room)
        else:
            k = clips.clips_per_video
            c = clip % k
            start = round(c * room / (k - 1)) if k > 1 else room // 2
        return ClipDraw(tuple(start + r for r in rel), (True,) * len(rel))
    return _short(clips.short, rel, n)  # the clip does not fit: from the first frame


def _short(policy: Short, rel: tuple[int, ...], n: int) -> ClipDraw:
    if policy is Short.LOOP:
        return ClipDraw(tuple(r % n for r in rel), (True,) * len(rel))
    real = tuple(r < n for r in rel)
    idx = tuple(min(r, n - 1) for r in rel)
    if policy is Short.PAD:
        return ClipDraw(idx, real)
    return ClipDraw(idx, (True,) * len(rel))


def _segments(frames: int, n: int, rng: random.Random, train: bool) -> ClipDraw:
    """TSN: ``frames`` equal segments of the video, one frame from each (random in training,
    the middle otherwise); a video of fewer frames than segments repeats frames."""
    length = n / frames
    out = []
    for k in range(frames):
        lo = min(n - 1, math.floor(k * length))
        hi = max(lo + 1, min(n, math.floor((k + 1) * length)))
        out.append(rng.randrange(lo, hi) if train else (lo + hi - 1) // 2)
    return ClipDraw(tuple(out), (True,) * frames)


__all__ = ["ClipDraw", "draw_clip", "frame_step", "offsets"]
