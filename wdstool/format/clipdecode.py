"""Video member bytes + frame indices -> those frames as uint8 RGB [T,H,W,3]: the one place
videos are decoded.

Only what the clip needs is decoded: the decoder seeks to the keyframe at or before the first
wanted frame and decodes forward to the last one (a seek is skipped when the first frame lies
before the second keyframe), never the whole video. Two backends, the same frames:

- **TorchCodec** (FFmpeg's shared libraries from the system; Debian's FFmpeg 5.1 loads once
  ``libavdevice59`` is installed): ``VideoDecoder(..., seek_mode="approximate")`` (no scan of
  the file on open), ``get_frames_at``;
- **PyAV** (its wheels carry their own FFmpeg): container seek + decode forward.

``WDSTOOL_VIDEO_DECODER=torchcodec|pyav`` picks one; by default TorchCodec where it loads,
else PyAV, and the choice is logged once per process. Codec threads are off (one thread): the
loader runs one decoder per worker, and codec threads in forked workers only contend.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from functools import cache
from typing import NamedTuple

import numpy as np
import torch

from wdstool.base.errors import ConfigError, SampleError
from wdstool.format.video import BadVideo, VideoInfo, open_container, probe_video

log = logging.getLogger(__name__)
# TorchCodec reads the member through a tensor over its (read-only) bytes; it never writes it
warnings.filterwarnings("ignore", message=r"The given buffer is not writable")
BACKENDS = ("torchcodec", "pyav")


class Clip(NamedTuple):
    """Decoded frames [T,H,W,3] uint8 (in the order asked, repeats included) and each
    frame's presentation time in seconds."""

    frames: torch.Tensor
    seconds: tuple[float, ...]


@cache
def _torchcodec_error() -> str | None:
    """Why TorchCodec's video decoder cannot be used here (None: it can)."""
    try:
        from torchcodec._core import ops  # noqa: F401  (loads libtorchcodec and FFmpeg)
        from torchcodec.decoders import VideoDecoder  # noqa: F401
    except Exception as exc:  # ImportError, or FFmpeg's libraries missing (RuntimeError)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{type(exc).__name__}: {first}"
    return None


@cache
def video_backend() -> str:
    """The backend this process decodes videos with (see the module's docstring)."""
    asked = os.environ.get("WDSTOOL_VIDEO_DECODER", "").strip().lower()
    if asked and asked not in BACKENDS:
        raise ConfigError(f"WDSTOOL_VIDEO_DECODER={asked!r}: expected one of {', '.join(BACKENDS)}")
    why = _torchcodec_error()
    if asked == "torchcodec" and why is not None:
        raise ConfigError(
            f"WDSTOOL_VIDEO_DECODER=torchcodec but TorchCodec does not load ({why}); install "
            "FFmpeg's shared libraries (Debian: apt-get install libavdevice59) or use pyav"
        )
    name = asked or ("torchcodec" if why is None else "pyav")
    if name == "pyav":
        try:
            import av  # noqa: F401
        except ImportError:
            raise ConfigError(
                "decoding videos needs PyAV or TorchCodec with FFmpeg: pip install av"
            ) from None
    reason = "" if asked or why is None else f" (TorchCodec unavailable: {why})"
    log.info("decoding videos with %s%s", name, reason)
    return name


def decode_frames(
    data: bytes | memoryview,
    indices: Sequence[int],
    *,
    info: VideoInfo | None = None,
    where: str = "",
    backend: str | None = None,
) -> Clip:
    """The frames ``indices`` of the video in ``data`` (indices past its end are its last
    frame); SampleError naming ``where`` when it does not decode."""
    if not len(indices):
        raise ValueError("decode_frames: no frame indices")
    name = backend or video_backend()
    want = sorted(set(int(i) for i in indices))
    try:
        if name == "torchcodec":
            frames, seconds = _torchcodec(data, want)
        else:
            frames, seconds = _pyav(data, want, info)
    except BadVideo as exc:
        raise SampleError(f"{where}: {exc}") from None
    except SampleError:
        raise
    except Exception as exc:  # FFmpeg's own errors, through either library
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SampleError(f"{where}: undecodable video ({text})") from None
    pos = {k: i for i, k in enumerate(want)}
    order = [pos[int(i)] for i in indices]
    if order == list(range(len(want))):
        return Clip(frames, seconds)
    return Clip(frames[order], tuple(seconds[i] for i in order))


def _torchcodec(data: bytes | memoryview, want: list[int]) -> tuple[torch.Tensor, tuple]:
    from torchcodec.decoders import VideoDecoder

    source = torch.frombuffer(data, dtype=torch.uint8) if len(data) else b""
    decoder = VideoDecoder(
        source, seek_mode="approximate", num_ffmpeg_threads=1, dimension_order="NHWC"
    )
    n = decoder.metadata.num_frames
    if n is not None and n > 0:
        want = [min(i, n - 1) for i in want]
    try:
        batch = decoder.get_frames_at(want)
    except (IndexError, RuntimeError):  # the header's count was more than the stream holds
        batch = _torchcodec_tolerant(decoder, want)
    return batch.data, tuple(float(s) for s in batch.pts_seconds)


def _torchcodec_tolerant(decoder, want: list[int]):  # type: ignore[no-untyped-def]
    """``get_frames_at`` where the last frames the header promised are missing: decoded one by
    one, the missing ones replaced by the last that decodes (BadVideo if none does)."""
    from torchcodec import FrameBatch

    got, last = [], None
    for i in want:
        try:
            last = decoder.get_frame_at(i)
        except (IndexError, RuntimeError):
            if last is None:
                raise BadVideo(f"undecodable video: frame {i} does not decode") from None
        got.append(last)
    return FrameBatch(
        data=torch.stack([f.data for f in got]),
        pts_seconds=torch.tensor([f.pts_seconds for f in got]),
        duration_seconds=torch.tensor([f.duration_seconds for f in got]),
    )


def _pyav(
    data: bytes | memoryview, want: list[int], info: VideoInfo | None
) -> tuple[torch.Tensor, tuple]:

    with open_container(data) as container:
        if not container.streams.video:
            raise BadVideo("no video stream")
        stream = container.streams.video[0]
        stream.thread_type = "SLICE"
        stream.codec_context.thread_count = 1
        rate = stream.average_rate or stream.guessed_rate
        if info is None and not rate:
            info = probe_video(data, decode=False)
        fps = info.fps if info is not None else float(rate)
        tb = float(stream.time_base)
        origin = stream.start_time if stream.start_time is not None else 0
        first, last = want[0], want[-1]
        keyframes = info.keyframes if info is not None else ()
        if not keyframes or first >= (keyframes[1] if len(keyframes) > 1 else 1 << 62):
            # to the keyframe at or before the first wanted frame (half a frame early: rounding)
            target = origin + int((first - 0.5) / fps / tb) if first > 0 else origin
            container.seek(max(origin, target), stream=stream, backward=True, any_frame=False)
        out: dict[int, np.ndarray] = {}
        seconds: dict[int, float] = {}
        wanted = set(want)
        prev: tuple[np.ndarray, float] | None = None
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            t = (frame.pts - origin) * tb
            k = round(t * fps)
            if k in wanted and k not in out:
                out[k] = frame.to_ndarray(format="rgb24")
                seconds[k] = t
            elif k > first and prev is None and not out:
                prev = (frame.to_ndarray(format="rgb24"), t)
            if k >= last:
                break
    if not out and prev is not None:
        out[first], seconds[first] = prev
    if not out:
        raise BadVideo(f"undecodable video: frame {first} does not decode")
    have = sorted(out)
    frames, secs = [], []
    for i in want:  # a missing frame (the stream ended early, a gap): the nearest before it
        k = max((h for h in have if h <= i), default=have[0])
        frames.append(out[k])
        secs.append(seconds[k])
    return torch.from_numpy(np.stack(frames)), tuple(float(s) for s in secs)


__all__ = ["BACKENDS", "Clip", "decode_frames", "video_backend"]
