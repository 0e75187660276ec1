"""A video sample as a picture: a strip of a few frames spread over the video, side by side.

Only the strip's frames are decoded (:mod:`wdstool.format.clipdecode`), each on its own: the
decoder seeks to the keyframe at or before it and decodes forward to it. A frame is taken at
the middle of each of ``STRIP_FRAMES`` equal parts of the video, or at a keyframe inside that
part where ``pack`` recorded one (the one nearest the middle): a keyframe decodes alone, so a
strip of a video with a keyframe in each part costs ``STRIP_FRAMES`` frames, not the video.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np
import torch
from torchvision.transforms.v2 import functional as F

from wdstool.format.clipdecode import open_video
from wdstool.format.video import VideoInfo
from wdstool.show.sheet import THUMB

STRIP_FRAMES = 5  # frames in a strip (odd: the middle one is the contact sheet's poster)


def strip_indices(frames: int, keyframes: Sequence[int], n: int = STRIP_FRAMES) -> list[int]:
    """The frame indices of a strip of a video of ``frames`` frames with these ``keyframes``
    (sorted; empty: unknown): per each of ``n`` equal parts, the keyframe in it nearest its
    middle, else its middle frame; increasing, without repeats (fewer for a short video)."""
    out: list[int] = []
    for k in range(n):
        lo, hi = k * frames / n, (k + 1) * frames / n
        middle = min(frames - 1, int((lo + hi) / 2))
        first = bisect.bisect_left(keyframes, lo)
        inside = keyframes[first : bisect.bisect_left(keyframes, hi)]
        out.append(min(inside, key=lambda f: abs(f - middle)) if inside else middle)
    return sorted(set(out))


def video_strip(
    data: bytes, info: VideoInfo | None, where: str, longest: int = THUMB
) -> tuple[np.ndarray, int, VideoInfo]:
    """The strip of the video in ``data`` (``info``: its facts from the shard, None: read from
    its header): uint8 H x (n*W) x 3, each frame scaled to at most ``longest`` pixels on its
    long side; ``n``, the frames in it; and the video's facts. SampleError (naming ``where``)
    when the video does not open or a frame does not decode."""
    video = open_video(data, info=info, where=where)
    info = video.info
    indices = strip_indices(info.frames, info.keyframes)
    # a frame at a time: each seeks to its keyframe (a keyframe decodes alone)
    clips = [video.frames([i]) for i in indices]
    frames = torch.cat([c.frames for c in clips]).permute(0, 3, 1, 2)  # [n,3,H,W]
    _, _, h, w = frames.shape
    if max(h, w) > longest:
        factor = longest / max(h, w)
        size = [max(1, round(h * factor)), max(1, round(w * factor))]
        frames = F.resize(frames, size, antialias=True)
    strip = torch.cat(list(frames), dim=2).permute(1, 2, 0)  # [h, n*w, 3]
    return np.ascontiguousarray(strip.numpy()), len(indices), info


def poster(strip: np.ndarray, frames: int) -> np.ndarray:
    """The middle frame of a strip of ``frames`` frames."""
    w = strip.shape[1] // max(1, frames)
    k = frames // 2
    return np.ascontiguousarray(strip[:, k * w : (k + 1) * w])
