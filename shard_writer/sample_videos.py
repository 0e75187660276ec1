"""Synthetic videos for demos, tests and benchmarks, with no network: a pan across one of the
real photographs ``sample_data`` cuts images from, encoded with PyAV (H.264 or VP9, a chosen
GOP, optional AAC/Opus audio: a tone whose pitch is the video's number).

Every frame carries its own index in a strip of 16 black/white blocks along its top edge
(:func:`frame_index` reads it back), so tests can check which frames a decoder returned. Video
i of class ``i % classes`` is a pure function of (seed, i, the settings).
"""

from __future__ import annotations

import io
import logging
import multiprocessing as mp
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from PIL import Image

from wdstool.base.errors import ConfigError

log = logging.getLogger(__name__)
BITS = 16  # index blocks along the top edge
CODECS = {"h264": ("libx264", "mp4", "yuv420p"), "vp9": ("libvpx-vp9", "webm", "yuv420p")}


@dataclass(frozen=True, kw_only=True)
class VideoSettings:
    """How sample videos are encoded: frame ``width``x``height``, ``fps``, ``gop`` (frames
    between keyframes), ``codec`` ("h264" | "vp9"), ``audio`` (sample rate; 0: none),
    ``crf`` (quality), ``bframes`` (H.264 B-frames)."""

    width: int = 640
    height: int = 360
    fps: int = 30
    gop: int = 60
    codec: str = "h264"
    audio: int = 0
    crf: int = 28
    bframes: int = 0

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ConfigError(f"codec={self.codec!r}: expected one of {', '.join(CODECS)}")
        if self.width < 32 or self.height < 32 or self.width % 2 or self.height % 2:
            raise ConfigError(f"video size {self.width}x{self.height}: even sides >= 32")
        if self.fps < 1 or self.gop < 1:
            raise ConfigError(f"fps={self.fps}, gop={self.gop}: both must be >= 1")


def _index_strip(frame: np.ndarray, i: int) -> None:
    h = max(8, frame.shape[0] // 24)
    w = frame.shape[1] // BITS
    for b in range(BITS):
        frame[:h, b * w : (b + 1) * w] = 255 if (i >> b) & 1 else 0


def frame_index(frame: np.ndarray | object) -> int:
    """The index a sample video's frame carries ([H,W,3] uint8, as decoded)."""
    a = np.asarray(frame)
    h = max(8, a.shape[0] // 24)
    w = a.shape[1] // BITS
    value = 0
    for b in range(BITS):
        block = a[2 : h - 2, b * w + 2 : (b + 1) * w - 2]
        if block.mean() > 127:
            value |= 1 << b
    return value


def _photo(seed: int, i: int, width: int, height: int) -> np.ndarray:
    from shard_writer.sample_data import source_photos

    photos = source_photos()
    name, img = photos[i % len(photos)]
    rng = random.Random(f"video:{seed}:{i}:{name}")
    scale = max(2 * width / img.width, 1.2 * height / img.height)
    size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
    big = img.convert("RGB").resize(size, Image.Resampling.BILINEAR)
    if rng.random() < 0.5:
        big = big.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(big)


def encode_video(
    frames: int, settings: VideoSettings = VideoSettings(), *, seed: int = 0, i: int = 0
) -> bytes:
    """A video of ``frames`` frames: a pan across a photograph, index strip on top."""
    import av

    s = settings
    codec, fmt, pix = CODECS[s.codec]
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=s.fps)
        stream.width, stream.height, stream.pix_fmt = s.width, s.height, pix
        opts = {"g": str(s.gop), "keyint_min": str(s.gop), "crf": str(s.crf)}
        if s.codec == "h264":
            opts.update(preset="veryfast", bf=str(s.bframes), sc_threshold="0")
        else:
            opts.update({"b:v": "0", "deadline": "realtime", "cpu-used": "8", "row-mt": "1"})
        stream.options = opts
        stream.thread_count = 1
        audio = None
        if s.audio:
            audio = out.add_stream("aac" if s.codec == "h264" else "libopus", rate=s.audio)
            audio.layout = "mono"
        photo = _photo(seed, i, s.width, s.height)
        span_x = photo.shape[1] - s.width
        span_y = photo.shape[0] - s.height
        for k in range(frames):
            t = k / max(1, frames - 1)
            x = round(span_x * t)
            y = round(span_y * (0.5 + 0.5 * np.sin(2 * np.pi * t)))
            a = np.ascontiguousarray(photo[y : y + s.height, x : x + s.width])
            _index_strip(a, k)
            frame = av.VideoFrame.from_ndarray(a, format="rgb24")
            frame.pts = k
            frame.time_base = Fraction(1, s.fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
        if audio is not None:
            _encode_tone(out, audio, frames / s.fps, 220.0 + 20 * (i % 20))
    return buf.getvalue()


def _encode_tone(out, stream, seconds: float, pitch: float) -> None:  # type: ignore[no-untyped-def]
    import av

    rate = stream.rate
    n = round(seconds * rate)
    chunk = 1024 if stream.codec_context.name == "aac" else 960
    t = np.arange(n) / rate
    wave = (0.3 * np.sin(2 * np.pi * pitch * t)).astype(np.float32)
    for start in range(0, n, chunk):
        part = wave[start : start + chunk]
        frame = av.AudioFrame.from_ndarray(part[None, :], format="fltp", layout="mono")
        frame.sample_rate = rate
        frame.pts = start
        frame.time_base = Fraction(1, rate)
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)


def generate_sample_videos(
    dest: str | Path,
    *,
    videos: int = 20,
    classes: int = 4,
    seed: int = 0,
    min_seconds: float = 2.0,
    max_seconds: float = 6.0,
    settings: VideoSettings = VideoSettings(),
    workers: int = 1,
) -> int:
    """An ImageFolder-style tree ``dest/class_c/video_iiiii.<ext>`` of ``videos`` sample videos
    of ``min_seconds``..``max_seconds`` (encoded by ``workers`` processes); the bytes written."""
    if videos < 1 or classes < 1 or not 0 < min_seconds <= max_seconds:
        raise ConfigError(
            f"videos={videos}, classes={classes}, seconds {min_seconds}..{max_seconds}: "
            "need videos, classes >= 1 and 0 < min_seconds <= max_seconds"
        )
    root = Path(dest)
    jobs = [(root, i, classes, seed, min_seconds, max_seconds, settings) for i in range(videos)]
    if workers <= 1:
        return sum(_write_one(*job) for job in jobs)
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        return sum(pool.map(_write_one, *zip(*jobs, strict=True)))


def _write_one(
    root: Path,
    i: int,
    classes: int,
    seed: int,
    min_seconds: float,
    max_seconds: float,
    settings: VideoSettings,
) -> int:
    """Sample video ``i`` written (atomically) into its class folder; its size."""
    rng = random.Random(f"seconds:{seed}:{i}")
    seconds = rng.uniform(min_seconds, max_seconds)
    ext = CODECS[settings.codec][1]
    path = root / f"class_{i % classes:03d}" / f"video_{i:05d}.{ext}"
    if path.exists():  # an interrupted run goes on where it stopped
        return path.stat().st_size
    path.parent.mkdir(parents=True, exist_ok=True)
    data = encode_video(max(1, round(seconds * settings.fps)), settings, seed=seed, i=i)
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(path)
    return len(data)


__all__ = ["VideoSettings", "encode_video", "frame_index", "generate_sample_videos"]
