"""Video members: which bytes are a video, and what a video holds, without decoding all of it.

Both sides read videos through here: ``pack`` probes a source video (its container, streams,
frame count, keyframes; one frame decoded to prove the codec works) and stores the facts in
``KEY.json`` under ``"video"``; the loaders read those facts (or probe the member when a
foreign shard has none) to draw a clip's frames before decoding only them
(:mod:`wdstool.format.clipdecode`). The member extension comes from the bytes, never the name.

Frame indices are presentation order: frame ``i`` is the ``i``-th frame a player shows, at
``i / fps`` seconds after the first (constant frame rate; a variable-rate video is indexed by
its average rate, which is what TorchCodec's and PyAV's approximate modes do as well).
"""

from __future__ import annotations

import io
import logging
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

# member extensions that hold a video, in the order a sample's video is chosen among them
VIDEO_ORDER = ("mp4", "webm", "mkv", "mov", "m4v", "avi")
VIDEO_EXTENSIONS: frozenset[str] = frozenset(VIDEO_ORDER)
MAX_KEYFRAMES = 4096  # keyframe positions kept in the facts (a 2 s GOP: 2.3 hours)
MAX_FRAME_PIXELS = 8192 * 8192


class BadVideo(ValueError):
    """These bytes are not a video wdstool can use; the message is the reason."""


def video_kind(data: bytes | memoryview) -> str | None:
    """The member extension of a video container, from its leading bytes; None: not a video."""
    head = bytes(data[:64])
    if head[4:8] == b"ftyp":
        return "mov" if head[8:12] == b"qt  " else "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":  # EBML: Matroska, or WebM by its DocType
        return "webm" if b"webm" in head else "mkv"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "avi"
    return None


@dataclass(frozen=True, kw_only=True)
class VideoInfo:
    """What a video holds: ``frames`` (counted packets of its first video stream), ``fps``
    (average rate), ``duration`` (``frames / fps`` seconds), frame ``width``/``height``,
    ``codec``, ``keyframes`` (frame indices of the first ``MAX_KEYFRAMES``; empty when not
    known), and its first audio stream's ``audio_rate``/``audio_channels`` (0: none)."""

    frames: int
    fps: float
    width: int
    height: int
    codec: str
    keyframes: tuple[int, ...] = ()
    audio_rate: int = 0
    audio_channels: int = 0

    @property
    def duration(self) -> float:
        return self.frames / self.fps if self.fps > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The facts ``KEY.json`` carries under ``"video"`` (canonical: fps rounded)."""
        out = asdict(self)
        out["fps"] = round(self.fps, 6)
        out["duration"] = round(self.duration, 6)
        out["keyframes"] = list(self.keyframes)
        return out

    @classmethod
    def from_json(cls, obj: Any) -> VideoInfo | None:
        """The facts back from ``KEY.json``'s ``"video"`` (None when absent or malformed)."""
        if not isinstance(obj, dict):
            return None
        try:
            info = cls(
                frames=int(obj["frames"]),
                fps=float(obj["fps"]),
                width=int(obj["width"]),
                height=int(obj["height"]),
                codec=str(obj.get("codec", "")),
                keyframes=tuple(int(k) for k in obj.get("keyframes", ())),
                audio_rate=int(obj.get("audio_rate", 0)),
                audio_channels=int(obj.get("audio_channels", 0)),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return info if info.frames > 0 and info.fps > 0 else None


def open_container(data: bytes | memoryview) -> Any:
    """A PyAV input container over ``data`` (BadVideo when it is not one)."""
    import av

    try:
        return av.open(io.BytesIO(data), mode="r")
    except av.error.FFmpegError as exc:
        raise BadVideo(f"not a readable video container ({_why(exc)})") from None


def _why(exc: Exception) -> str:
    text = getattr(exc, "strerror", None) or str(exc)
    return text.split(": '<")[0].strip() or type(exc).__name__


def probe_video(data: bytes | memoryview, *, decode: bool = True) -> VideoInfo:
    """The facts of a video, from a demux of its first video stream's packets (no decode of
    them) and, with ``decode``, a decode of its first frames (the codec works); BadVideo with
    the reason otherwise: not a container, no video stream, no frames, a truncated or damaged
    stream, a frame too large."""
    import av

    if video_kind(data) is None:
        raise BadVideo("not a video (unrecognised container)")
    with open_container(data) as container:
        if not container.streams.video:
            raise BadVideo("no video stream")
        stream = container.streams.video[0]
        ctx = stream.codec_context
        width, height = ctx.width, ctx.height
        if width < 1 or height < 1:
            raise BadVideo(f"invalid frame size {width}x{height}")
        if width * height > MAX_FRAME_PIXELS:
            raise BadVideo(f"frame too large: {width}x{height} pixels")
        rate = stream.average_rate or stream.guessed_rate or stream.base_rate
        fps = float(rate) if rate else 0.0
        if fps <= 0:
            raise BadVideo("no frame rate")
        audio = container.streams.audio[0] if container.streams.audio else None
        pts: list[int] = []
        keys: list[int] = []
        try:
            for packet in container.demux(stream):
                if packet.size == 0 or packet.pts is None:
                    continue
                pts.append(packet.pts)
                if packet.is_keyframe:
                    keys.append(packet.pts)
        except av.error.FFmpegError as exc:
            raise BadVideo(f"damaged stream after {len(pts)} frames ({_why(exc)})") from None
        if not pts:
            raise BadVideo("no frames")
        _check_whole(container, stream, pts, fps)
        order = {p: i for i, p in enumerate(sorted(pts))}
        keyframes = tuple(sorted(order[k] for k in keys))[:MAX_KEYFRAMES]
        info = VideoInfo(
            frames=len(pts),
            fps=fps,
            width=width,
            height=height,
            codec=ctx.name,
            keyframes=keyframes,
            audio_rate=int(audio.codec_context.sample_rate or 0) if audio else 0,
            audio_channels=int(audio.codec_context.channels or 0) if audio else 0,
        )
    if decode:
        _decodes(data)
    return info


def _check_whole(container: Any, stream: Any, pts: list[int], fps: float) -> None:
    """BadVideo when the stream holds fewer frames than its container declares (a file cut
    short whose index or header survived): MP4's frame count, Matroska/WebM's duration."""
    declared = int(stream.frames or 0)
    if declared and len(pts) < declared:
        raise BadVideo(f"truncated: {len(pts)} of its {declared} frames are in the file")
    if not declared and container.duration and stream.time_base:
        seconds = container.duration / 1_000_000  # av.time_base
        last = float((max(pts) - min(pts)) * stream.time_base) + 1.0 / fps
        if last < seconds - max(0.2, 3.0 / fps):  # audio may outlast the video a little
            raise BadVideo(f"truncated: {last:.2f} s of its {seconds:.2f} s are in the file")


def _decodes(data: bytes | memoryview) -> None:
    """The first frame decodes (BadVideo otherwise)."""
    import av

    with open_container(data) as container:
        stream = container.streams.video[0]
        try:
            for _frame in container.decode(stream):
                return
        except av.error.FFmpegError as exc:
            raise BadVideo(f"undecodable video ({_why(exc)})") from None
    raise BadVideo("undecodable video: no frame decodes")


__all__ = [
    "VIDEO_EXTENSIONS",
    "VIDEO_ORDER",
    "BadVideo",
    "VideoInfo",
    "open_container",
    "probe_video",
    "video_kind",
]
