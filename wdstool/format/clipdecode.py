"""Video member bytes + frame indices -> those frames as uint8 RGB [T,H,W,3]: the one place
videos are decoded.

Only what the clip needs is decoded: the decoder seeks to the keyframe at or before the first
wanted frame and decodes forward to the last one (no seek when the first frame lies before the
second keyframe, which the pack's facts tell), never the whole video. Two backends, the same
frames:

- **PyAV** (its wheels carry their own FFmpeg; the ``video`` extra): demux, then decode packet
  by packet, telling FFmpeg to drop every *non-reference* frame the clip does not need
  (``skip_frame=NONREF`` set per packet: nothing references such a frame, so the others decode
  to the same pixels). With x264's default B-frames that skips ~35% of the frames between the
  keyframe and the clip's end: 39 ms instead of 54 for a 16-frame clip, stride 2, of a
  640x360 video, GOP 60 (``WDSTOOL_VIDEO_SKIP_NONREF=0`` turns it off, for comparisons);
- **TorchCodec** (FFmpeg's shared libraries from the system; Debian's FFmpeg 5.1 loads once
  ``libavdevice59`` is installed): ``VideoDecoder(..., seek_mode="approximate")`` (no scan of
  the file on open), ``get_frames_at``. It has no per-packet control, so it decodes every frame
  from the keyframe on.

``WDSTOOL_VIDEO_DECODER=pyav|torchcodec`` picks one; by default PyAV where it is installed,
else TorchCodec where it loads, and the choice is logged once per process. Codec threads are
off (one thread): the loader runs one decoder per worker, and codec threads in forked workers
only contend.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Sequence
from functools import cache
from typing import NamedTuple

import numpy as np
import torch

from wdstool.base.errors import ConfigError, SampleError
from wdstool.format.torchcodec_probe import torchcodec_error
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
def video_backend() -> str:
    """The backend this process decodes videos with (see the module's docstring)."""
    asked = os.environ.get("WDSTOOL_VIDEO_DECODER", "").strip().lower()
    if asked and asked not in BACKENDS:
        raise ConfigError(f"WDSTOOL_VIDEO_DECODER={asked!r}: expected one of {', '.join(BACKENDS)}")
    try:
        import av  # noqa: F401

        has_av = True
    except ImportError:
        has_av = False
    if asked == "pyav" and not has_av:
        raise ConfigError("WDSTOOL_VIDEO_DECODER=pyav but PyAV is not installed: pip install av")
    name = asked or ("pyav" if has_av else "torchcodec")
    # TorchCodec (and the FFmpeg it loads) only where it is the one used
    why = torchcodec_error() if name == "torchcodec" else None
    if why is not None and asked:
        raise ConfigError(
            f"WDSTOOL_VIDEO_DECODER=torchcodec but TorchCodec does not load ({why}); install "
            "FFmpeg's shared libraries (Debian: apt-get install libavdevice59) or use pyav"
        )
    if why is not None:
        raise ConfigError(
            f"decoding videos needs PyAV (pip install -e '.[video]') or TorchCodec with "
            f"FFmpeg's libraries; TorchCodec does not load here ({why})"
        )
    reason = "" if asked or has_av else " (PyAV is not installed)"
    log.info("decoding videos with %s%s", name, reason)
    return name


def open_video(
    data: bytes | memoryview,
    *,
    info: VideoInfo | None = None,
    where: str = "",
    backend: str | None = None,
) -> OpenVideo:
    """``data`` opened for clips (its container header only): ``info`` where the shard's
    ``.json`` gave the facts, else what the header says. SampleError naming ``where`` when it
    is not a video."""
    name = backend or video_backend()
    try:
        if name == "torchcodec":
            return _TorchCodecVideo(data, info, where)
        return _PyAVVideo(data, info, where)
    except SampleError:
        raise
    except BadVideo as exc:
        raise SampleError(f"{where}: {exc}") from None
    except Exception as exc:  # FFmpeg's own errors, through either library
        raise SampleError(f"{where}: not a readable video ({_first_line(exc)})") from None


def decode_frames(
    data: bytes | memoryview,
    indices: Sequence[int],
    *,
    info: VideoInfo | None = None,
    where: str = "",
    backend: str | None = None,
) -> Clip:
    """The frames ``indices`` of the video in ``data`` (see :meth:`OpenVideo.frames`)."""
    return open_video(data, info=info, where=where, backend=backend).frames(indices)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class OpenVideo:
    """One video member, opened once per sample: ``info`` (frames, fps, size), then the frames
    of a clip and the audio of its span."""

    info: VideoInfo
    where: str
    audio_unknown = False  # ``info`` came from a header that was not asked about sound

    def frames(self, indices: Sequence[int]) -> Clip:
        """The frames ``indices`` (repeats allowed, any order; an index past the end is the
        last frame): decoded from the keyframe at or before the first wanted one, forward to
        the last; SampleError naming the sample when the stream does not decode."""
        if not len(indices):
            raise ValueError("no frame indices")
        want = sorted(set(int(i) for i in indices))
        try:
            frames, seconds = self._decode(want)
        except SampleError:
            raise
        except BadVideo as exc:
            raise SampleError(f"{self.where}: {exc}") from None
        except Exception as exc:
            raise SampleError(f"{self.where}: undecodable video ({_first_line(exc)})") from None
        pos = {k: i for i, k in enumerate(want)}
        order = [pos[int(i)] for i in indices]
        if order == list(range(len(want))):
            return Clip(frames, seconds)
        return Clip(frames[order], tuple(seconds[i] for i in order))

    def audio(self, start: float, stop: float, rate: int, channels: int) -> torch.Tensor:
        """The audio played in [start, stop) seconds, resampled to ``rate`` Hz and ``channels``
        channels: float32 [channels, samples] (0 samples for a video without sound)."""
        if not (self.info.audio_rate or self.audio_unknown):
            return torch.zeros(channels, 0)
        try:
            out = self._audio(start, stop, rate, channels)
        except Exception as exc:
            raise SampleError(f"{self.where}: undecodable audio ({_first_line(exc)})") from None
        want = max(0, round((stop - start) * rate))
        return out[:, :want].contiguous().to(torch.float32)

    def _decode(self, want: list[int]) -> tuple[torch.Tensor, tuple[float, ...]]:
        raise NotImplementedError

    def _audio(self, start: float, stop: float, rate: int, channels: int) -> torch.Tensor:
        raise NotImplementedError


def _source(data: bytes | memoryview) -> torch.Tensor:
    return torch.frombuffer(data, dtype=torch.uint8)


class _TorchCodecVideo(OpenVideo):
    def __init__(self, data: bytes | memoryview, info: VideoInfo | None, where: str) -> None:
        from torchcodec.decoders import VideoDecoder

        if not len(data):
            raise BadVideo("empty video member")
        self.data, self.where = data, where
        self.decoder = VideoDecoder(
            _source(data), seek_mode="approximate", num_ffmpeg_threads=1, dimension_order="NHWC"
        )
        m = self.decoder.metadata
        self.count = int(m.num_frames or 0)
        if info is None:
            fps = float(m.average_fps or 0)
            if not (self.count and fps and m.width and m.height):
                info = probe_video(data, decode=False)  # a header without counts: demux it
            else:
                info = VideoInfo(
                    frames=self.count,
                    fps=fps,
                    width=int(m.width),
                    height=int(m.height),
                    codec=str(m.codec or ""),
                )
                self.audio_unknown = True  # its header's audio is not looked at until asked
        self.info = info

    def _decode(self, want: list[int]) -> tuple[torch.Tensor, tuple[float, ...]]:
        n = self.count or self.info.frames
        want = [min(i, n - 1) for i in want]
        try:
            batch = self.decoder.get_frames_at(want)
        except (IndexError, RuntimeError):  # the header promised frames the stream lacks
            batch = self._tolerant(want)
        return batch.data, tuple(float(s) for s in batch.pts_seconds)

    def _tolerant(self, want: list[int]):  # type: ignore[no-untyped-def]
        """``get_frames_at`` frame by frame, a missing one replaced by the last that decodes."""
        from torchcodec import FrameBatch

        got, last = [], None
        for i in want:
            try:
                last = self.decoder.get_frame_at(i)
            except (IndexError, RuntimeError):
                if last is None:
                    raise BadVideo(f"undecodable video: frame {i} does not decode") from None
            got.append(last)
        return FrameBatch(
            data=torch.stack([f.data for f in got]),
            pts_seconds=torch.tensor([f.pts_seconds for f in got]),
            duration_seconds=torch.tensor([f.duration_seconds for f in got]),
        )

    def _audio(self, start: float, stop: float, rate: int, channels: int) -> torch.Tensor:
        from torchcodec.decoders import AudioDecoder

        try:
            decoder = AudioDecoder(_source(self.data), sample_rate=rate, num_channels=channels)
        except ValueError:  # "the best audio stream is unknown": the video has no sound
            if self.audio_unknown:
                return torch.zeros(channels, 0)
            raise
        return decoder.get_samples_played_in_range(start, stop).data


_local = threading.local()


def _rgb(frame: object) -> np.ndarray:
    """A decoded frame as [H,W,3] RGB through this thread's one reformatter: ``to_ndarray(
    format="rgb24")`` builds a new swscale context for every frame (~5 ms each at 640x360,
    measured here, against ~0.2 ms with one kept)."""
    pid, reformatter = getattr(_local, "reformatter", (0, None))
    if reformatter is None or pid != os.getpid():  # never one inherited through a fork
        from av.video.reformatter import VideoReformatter

        reformatter = VideoReformatter()
        _local.reformatter = (os.getpid(), reformatter)
    # one thread: swscale's own thread pool (its default) would contend with the workers, and
    # a forked worker inheriting it would wait on threads it does not have
    return reformatter.reformat(frame, format="rgb24", threads=1).to_ndarray()


class _PyAVVideo(OpenVideo):
    skip = os.environ.get("WDSTOOL_VIDEO_SKIP_NONREF", "1") != "0"  # off: for comparisons
    read = False  # frames were decoded from the container already (it is no longer at its start)

    def __init__(self, data: bytes | memoryview, info: VideoInfo | None, where: str) -> None:
        self.data, self.where = data, where
        self.container = open_container(data)
        if not self.container.streams.video:
            self.container.close()
            raise BadVideo("no video stream")
        video = self.container.streams.video[0]
        video.thread_type = "SLICE"  # set before the codec opens (the first decode)
        video.codec_context.thread_count = 1
        if info is None:
            stream = self.container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate
            frames = stream.frames or (
                round(float(stream.duration * stream.time_base) * float(rate))
                if stream.duration and rate
                else 0
            )
            if not (frames and rate):
                info = probe_video(data, decode=False)
            else:
                audio = self.container.streams.audio
                ctx = audio[0].codec_context if audio else None
                info = VideoInfo(
                    frames=int(frames),
                    fps=float(rate),
                    width=stream.codec_context.width,
                    height=stream.codec_context.height,
                    codec=stream.codec_context.name,
                    audio_rate=int(ctx.sample_rate or 0) if ctx else 0,
                    audio_channels=int(ctx.channels or 0) if ctx else 0,
                )
        self.info = info

    def __del__(self) -> None:
        container = getattr(self, "container", None)
        if container is not None:
            container.close()

    def _decode(self, want: list[int]) -> tuple[torch.Tensor, tuple[float, ...]]:
        container, info = self.container, self.info
        stream = container.streams.video[0]
        fps, tb = info.fps, float(stream.time_base)
        origin = stream.start_time if stream.start_time is not None else 0
        first, last = want[0], want[-1]
        keys = info.keyframes
        # no seek only from the start of a container nothing was read from yet
        in_first_gop = not self.read and keys and first < (keys[1] if len(keys) > 1 else 1 << 62)
        self.read = True
        if not in_first_gop:
            # to the keyframe at or before the first wanted frame (half a frame early: rounding)
            target = origin + int((first - 0.5) / fps / tb) if first > 0 else origin
            container.seek(max(origin, target), stream=stream, backward=True, any_frame=False)
        out: dict[int, np.ndarray] = {}
        seconds: dict[int, float] = {}
        wanted = set(want)
        ctx = stream.codec_context
        for packet in container.demux(stream):  # its last packet is empty: it flushes
            if packet.pts is not None and self.skip:
                # a frame no clip frame needs and that no other frame references is not
                # decoded at all (H.264's non-reference B-frames: ~1/3 of the frames here)
                k = round((packet.pts - origin) * tb * fps)
                ctx.skip_frame = "DEFAULT" if k in wanted else "NONREF"
            done = False
            for frame in ctx.decode(packet):
                if frame.pts is None:
                    continue
                t = (frame.pts - origin) * tb
                k = round(t * fps)
                if k in wanted and k not in out:
                    out[k] = _rgb(frame)
                    seconds[k] = t
                elif k > first and not out:  # the stream lacks the first wanted index
                    out[first], seconds[first] = _rgb(frame), t
                done = done or k >= last
            if done:
                break
        if not out:
            raise BadVideo(f"undecodable video: frame {first} does not decode")
        have = sorted(out)
        frames, secs = [], []
        for i in want:  # a missing frame (the stream ended early, a gap): the nearest before
            k = max((h for h in have if h <= i), default=have[0])
            frames.append(out[k])
            secs.append(seconds[k])
        return torch.from_numpy(np.stack(frames)), tuple(float(s) for s in secs)

    def _audio(self, start: float, stop: float, rate: int, channels: int) -> torch.Tensor:
        import av

        container = self.container  # the one the frames came from: seeked back for sound
        stream = container.streams.audio[0]
        layout = "mono" if channels == 1 else "stereo"
        resampler = av.AudioResampler(format="fltp", layout=layout, rate=rate)
        container.seek(max(0, int(start / float(stream.time_base))), stream=stream)
        parts, first = [], None
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            t = float(frame.pts * stream.time_base)
            if t >= stop:
                break
            for f in resampler.resample(frame):
                if first is None:
                    first = float(f.pts * f.time_base) if f.pts is not None else t
                parts.append(f.to_ndarray())
        if not parts:
            return torch.zeros(channels, 0)
        wave = torch.from_numpy(np.concatenate(parts, axis=1))
        skip = max(0, round((start - (first or 0.0)) * rate))
        return wave[:, skip:]


__all__ = ["BACKENDS", "Clip", "OpenVideo", "decode_frames", "open_video", "video_backend"]
