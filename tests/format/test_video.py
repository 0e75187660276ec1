"""The video format layer on real encoded videos: sniffing, probing, truncation, frame-exact
decoding through both backends (frames carry their index: ``shard_writer.sample_videos``)."""

from __future__ import annotations

import pytest

from shard_writer.sample_videos import VideoSettings, encode_video, frame_index
from wdstool.base.errors import ConfigError, SampleError
from wdstool.format import clipdecode
from wdstool.format.clipdecode import decode_frames, open_video
from wdstool.format.torchcodec_probe import torchcodec_error
from wdstool.format.video import BadVideo, VideoInfo, probe_video, video_kind

H264 = VideoSettings(width=96, height=64, fps=25, gop=10, bframes=3)
VP9 = VideoSettings(codec="vp9", width=96, height=64, fps=30, gop=15)
AUDIO = VideoSettings(width=64, height=48, fps=20, gop=20, audio=16000)
BACKENDS = [
    "pyav",
    pytest.param(
        "torchcodec",
        marks=pytest.mark.skipif(
            torchcodec_error() is not None,
            reason=f"TorchCodec does not load here ({torchcodec_error()}); "
            "apt-get install libavdevice59",
        ),
    ),
]


@pytest.fixture(scope="module")
def clips() -> dict[str, bytes]:
    return {
        "h264": encode_video(70, H264),
        "vp9": encode_video(45, VP9),
        "audio": encode_video(40, AUDIO),
    }


def test_container_kinds_come_from_the_bytes(clips: dict[str, bytes]) -> None:
    assert video_kind(clips["h264"]) == "mp4"
    assert video_kind(clips["vp9"]) == "webm"
    assert video_kind(b"\x1a\x45\xdf\xa3" + b"\x00" * 20 + b"matroska") == "mkv"
    assert video_kind(b"RIFF\x00\x00\x00\x00AVI LIST") == "avi"
    assert video_kind(b"\x00\x00\x00\x14ftypqt  ") == "mov"
    assert video_kind(b"\xff\xd8\xff\xe0") is None


def test_probe_counts_frames_and_keyframes(clips: dict[str, bytes]) -> None:
    info = probe_video(clips["h264"])
    assert (info.frames, info.fps, info.width, info.height, info.codec) == (
        70,
        25.0,
        96,
        64,
        "h264",
    )
    assert info.keyframes == tuple(range(0, 70, 10))
    assert info.audio_rate == 0 and info.duration == pytest.approx(2.8)
    vp9 = probe_video(clips["vp9"])
    assert (vp9.frames, vp9.codec, vp9.keyframes[:3]) == (45, "vp9", (0, 15, 30))
    audio = probe_video(clips["audio"])
    assert (audio.audio_rate, audio.audio_channels) == (16000, 1)
    assert VideoInfo.from_json(info.to_json()) == info
    assert VideoInfo.from_json({"frames": "x"}) is None


@pytest.mark.parametrize("kind", ["h264", "vp9"])
def test_cut_videos_are_bad_with_a_reason(clips: dict[str, bytes], kind: str) -> None:
    data = clips[kind]
    for cut in (0.5, 0.85):
        with pytest.raises(BadVideo, match=r"truncated|not a readable|no video stream"):
            probe_video(data[: int(len(data) * cut)])
    with pytest.raises(BadVideo, match="not a video"):
        probe_video(b"\x00" * 100)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["h264", "vp9"])
def test_frames_are_the_ones_asked_for(clips: dict[str, bytes], kind: str, backend: str) -> None:
    """Any order, repeats, past the end (the last frame), across keyframes and B-frames; with
    the pack's facts or from the header alone."""
    data = clips[kind]
    n = probe_video(data).frames
    want = [12, 14, 16, n - 1, 0, 3, 3, n + 5]
    for info in (probe_video(data), None):
        clip = decode_frames(data, want, info=info, backend=backend)
        assert [frame_index(f.numpy()) for f in clip.frames] == [min(i, n - 1) for i in want]
        fps = probe_video(data).fps
        assert clip.seconds[0] == pytest.approx(12 / fps, abs=1e-3)
        assert tuple(clip.frames.shape) == (len(want), 64, 96, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_audio_of_a_span(clips: dict[str, bytes], backend: str) -> None:
    v = open_video(clips["audio"], backend=backend)
    wave = v.audio(0.5, 1.25, 8000, 2)
    assert wave.shape == (2, 6000) and float(wave.abs().max()) > 0.2
    silent = open_video(clips["h264"], backend=backend).audio(0.0, 1.0, 8000, 1)
    assert silent.shape == (1, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_damaged_stream_names_the_sample(clips: dict[str, bytes], backend: str) -> None:
    data = clips["h264"]
    broken = data[:48] + bytes(len(data) - 48)
    with pytest.raises(SampleError, match=r"^shard\.tar: sample 'k'"):
        decode_frames(broken, [5], where="shard.tar: sample 'k'", backend=backend)


def test_the_backend_is_chosen_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clipdecode.video_backend.cache_clear()
    try:
        monkeypatch.setenv("WDSTOOL_VIDEO_DECODER", "pyav")
        assert clipdecode.video_backend() == "pyav"
        clipdecode.video_backend.cache_clear()
        monkeypatch.setenv("WDSTOOL_VIDEO_DECODER", "ffmpeg-cli")
        with pytest.raises(ConfigError, match="WDSTOOL_VIDEO_DECODER='ffmpeg-cli'"):
            clipdecode.video_backend()
    finally:
        clipdecode.video_backend.cache_clear()


def test_asking_for_torchcodec_tells_the_truth(
    clips: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe decodes, so its answer is what decoding does: TorchCodec 0.17 imports without
    FFmpeg's libraries and failed only at the first frame, where every sample became "not a
    readable video" instead of the ConfigError naming the package."""
    monkeypatch.setenv("WDSTOOL_VIDEO_DECODER", "torchcodec")
    clipdecode.video_backend.cache_clear()
    try:
        if torchcodec_error() is None:
            assert clipdecode.video_backend() == "torchcodec"
            frames = decode_frames(clips["h264"], [0, 3], where="k")
            assert [frame_index(f.numpy()) for f in frames.frames] == [0, 3]
        else:
            with pytest.raises(ConfigError, match=r"torchcodec.*libavdevice59"):
                clipdecode.video_backend()
            with pytest.raises(SampleError, match="not a readable video"):
                decode_frames(clips["h264"], [0], where="k", backend="torchcodec")
    finally:
        clipdecode.video_backend.cache_clear()


def test_skipping_unneeded_frames_changes_no_pixel(
    clips: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyAV drops the non-reference frames a clip does not need (x264's B-frames): every clip
    frame equals the one a decode of every frame gives."""
    import random

    data = clips["h264"]
    rng = random.Random(0)
    wants = [[s + 2 * k for k in range(6)] for s in (rng.randint(0, 57) for _ in range(12))]
    skipped = [decode_frames(data, w, backend="pyav").frames for w in wants]
    monkeypatch.setattr(clipdecode._PyAVVideo, "skip", False)
    full = [decode_frames(data, w, backend="pyav").frames for w in wants]
    assert all(a.equal(b) for a, b in zip(skipped, full, strict=True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_opened_video_gives_frames_again_and_again(
    clips: dict[str, bytes], backend: str
) -> None:
    """Several calls on one opened video (``wdstool show``'s strips): each call seeks, so a
    frame of the first GOP after a later one is still that frame."""
    data = clips["h264"]
    video = open_video(data, info=probe_video(data), backend=backend)
    for want in ([40], [3], [65], [0, 1], [12]):
        assert [frame_index(f.numpy()) for f in video.frames(want).frames] == want
