"""sample-data: real photographs, deterministic bytes, ImageFolder-compatible."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torchvision
from PIL import Image

from shard_writer.sample_data import generate_sample_data
from tests.conftest import run_cli
from wdstool.base.errors import ConfigError, DestinationError


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.jpg"))
    }


def test_tree_shape_sizes_and_determinism(tmp_path: Path) -> None:
    a = generate_sample_data(tmp_path / "a", images=24, classes=5, seed=3, workers=1)
    generate_sample_data(tmp_path / "b", images=24, classes=5, seed=3, workers=2)
    generate_sample_data(tmp_path / "c", images=24, classes=5, seed=4, workers=1)
    assert a.images == 24 and a.classes == 5
    da, db, dc = digests(tmp_path / "a"), digests(tmp_path / "b"), digests(tmp_path / "c")
    assert da == db  # same seed: same bytes, whatever the workers
    assert da.keys() == dc.keys() and all(da[k] != dc[k] for k in da)
    folders = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert folders == [f"class_{c:03d}" for c in range(5)]
    assert [len(list((tmp_path / "a" / f).glob("*.jpg"))) for f in folders] == [5, 5, 5, 5, 4]
    sizes = []
    for p in (tmp_path / "a").rglob("*.jpg"):
        with Image.open(p) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            assert 400 <= img.width <= 500 and 340 <= img.height <= 420
        sizes.append(p.stat().st_size)
    assert 70_000 < sum(sizes) / len(sizes) < 140_000
    assert a.total_bytes == sum(sizes)
    tv = torchvision.datasets.ImageFolder(str(tmp_path / "a"))
    assert len(tv.classes) == 5 and len(tv) == 24
    assert not list((tmp_path / "a").rglob(".*tmp*"))


def test_bad_arguments_and_foreign_destination(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        generate_sample_data(tmp_path / "x", images=0, classes=1)
    with pytest.raises(ConfigError):
        generate_sample_data(tmp_path / "x", images=3, classes=4)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(DestinationError, match=r"notes\.txt"):
        generate_sample_data(tmp_path / "busy", images=2, classes=1)


def test_cli(tmp_path: Path) -> None:
    r = run_cli(
        "sample-data", str(tmp_path / "d"), "--images", "6", "--classes", "2", "--seed", "1"
    )
    assert "wrote 6 images in 2 classes" in r.stdout
    bad = run_cli(
        "sample-data", str(tmp_path / "e"), "--images", "2", "--classes", "5", check=False
    )
    assert bad.returncode != 0 and "--classes" in bad.stderr and "Traceback" not in bad.stderr


def test_size_option(tmp_path: Path) -> None:
    """--size WxH: images about that size (each side within the default's +-11% spread), same
    seed same bytes; a malformed size is a one-line error."""
    r = run_cli(
        "sample-data", str(tmp_path / "big"), "--images", "3", "--classes", "1", "--size", "800x600"
    )
    assert "wrote 3 images" in r.stdout
    for p in (tmp_path / "big").rglob("*.jpg"):
        with Image.open(p) as img:
            assert 800 * 400 / 450 <= img.width <= 800 * 500 / 450 + 1
            assert 600 * 340 / 380 <= img.height <= 600 * 420 / 380 + 1
    generate_sample_data(tmp_path / "again", images=3, classes=1, workers=1, size=(800, 600))
    generate_sample_data(tmp_path / "default", images=3, classes=1, workers=1)
    assert digests(tmp_path / "big") == digests(tmp_path / "again")
    assert digests(tmp_path / "big").keys() == digests(tmp_path / "default").keys()
    assert all(digests(tmp_path / "big")[k] != v for k, v in digests(tmp_path / "default").items())
    for bad in ("10x10", "1600", "wide"):
        proc = run_cli("sample-data", str(tmp_path / "x"), "--size", bad, check=False)
        assert proc.returncode != 0 and "--size" in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(ConfigError, match=r"^size=\(8, 8\): must be \(width, height\)"):
        generate_sample_data(tmp_path / "y", images=1, classes=1, size=(8, 8))


def test_videos_option(tmp_path: Path) -> None:
    """--videos N: N videos in class folders, as generate_sample_videos writes them (same
    seed, same frames), --seconds MIN-MAX long, --size their frames; a bad --seconds, or
    --images beside --videos, is a one-line error."""
    from shard_writer.sample_videos import VideoSettings, frame_index, generate_sample_videos
    from wdstool.format.clipdecode import decode_frames
    from wdstool.format.video import probe_video, video_kind

    dest = tmp_path / "videos"
    r = run_cli(
        "sample-data", str(dest), "--videos", "2", "--classes", "2", "--seconds", "0.5-1",
        "--size", "96x64", "--seed", "3",
    )  # fmt: skip
    assert "wrote 2 videos in 2 classes" in r.stdout
    files = sorted(p for p in dest.rglob("*") if p.is_file())
    names = [p.relative_to(dest).as_posix() for p in files]
    assert names == ["class_000/video_00000.mp4", "class_001/video_00001.mp4"]
    for p in files:
        data = p.read_bytes()
        assert video_kind(data) == "mp4"
        info = probe_video(data)
        assert (info.width, info.height) == (96, 64)
        assert 0.5 - 1 / info.fps <= info.duration <= 1 + 1 / info.fps
    again = tmp_path / "again"
    settings = VideoSettings(width=96, height=64)
    generate_sample_videos(
        again, videos=2, classes=2, seed=3, min_seconds=0.5, max_seconds=1, settings=settings
    )
    # the same videos: the same facts and, frame by frame, the same frames (each carries its
    # index in a strip) and pixels within x264's rounding. Not the same bytes: the bitstream
    # of PyAV's x264 (threads=1) differed between runs in one process under load (3 of 8
    # encodes here, 1 of 4 test runs on a loaded machine)
    for n, p in zip(names, files, strict=True):
        ours, theirs = (again / n).read_bytes(), p.read_bytes()
        fa, fb = probe_video(ours), probe_video(theirs)
        assert (fa.frames, fa.width, fa.height, fa.fps) == (fb.frames, fb.width, fb.height, fb.fps)
        every = list(range(fa.frames))
        ca, cb = decode_frames(ours, every).frames, decode_frames(theirs, every).frames
        assert [frame_index(f.numpy()) for f in ca] == every == [frame_index(f.numpy()) for f in cb]
        assert (ca.int() - cb.int()).abs().float().mean() < 4
    for args, flag in (
        (["--videos", "2", "--seconds", "6-2"], "--seconds"),
        (["--videos", "2", "--seconds", "two"], "--seconds"),
        (["--videos", "2", "--size", "97x64"], "--size"),
        (["--videos", "2", "--images", "3"], "--images"),
        (["--seconds", "1-2"], "--seconds"),  # images have no length
    ):
        proc = run_cli("sample-data", str(tmp_path / "x"), *args, check=False)
        assert proc.returncode != 0 and flag in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "x").exists()
