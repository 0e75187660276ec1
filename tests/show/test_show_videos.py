"""``wdstool show`` on video shards: each shown video is a strip of its frames (the frames the
strip plan names, decoded alone), its facts are on its tile, the statistics count videos, a
walk reads no video whole, and a video that does not decode is its tile's problem."""

from __future__ import annotations

import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shard_writer import PackOptions, pack
from shard_writer.sample_videos import VideoSettings, frame_index, generate_sample_videos
from tests.support.videos import shard_samples, video_bytes, write_shards
from wdstool.format.video import VideoInfo, probe_video, video_kind
from wdstool.show import ShowConfig, build_report
from wdstool.show.strip import STRIP_FRAMES, strip_indices, video_strip

SETTINGS = VideoSettings(width=96, height=64, fps=24, gop=12, crf=10)  # ~16 KB a second
VIDEOS = 6
QUICK = {"epochs": 0, "eval_transform": None}  # no views: they are for image samples


@dataclass(frozen=True)
class Packed:
    shards: Path
    videos: dict[str, bytes]  # key -> the video member's bytes
    facts: dict[str, VideoInfo]  # key -> pack's facts (KEY.json's "video")


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Packed:
    """Six real videos (96x64, 1-2 s, a keyframe every 12 frames) packed by ``pack``, three
    to a shard."""
    where = tmp_path_factory.mktemp("show-videos")
    tree, shards = where / "tree", where / "shards"
    generate_sample_videos(
        tree, videos=VIDEOS, classes=2, seed=3, min_seconds=1, max_seconds=2, settings=SETTINGS
    )
    pack(str(tree), str(shards), PackOptions(max_count=3, workers=1))
    members = shard_samples(shards)
    videos = {k: m["mp4"] for k, m in members.items()}
    facts = {k: VideoInfo.from_json(json.loads(m["json"])["video"]) for k, m in members.items()}
    assert len(videos) == VIDEOS and all(facts.values())
    return Packed(shards=shards, videos=videos, facts=facts)  # type: ignore[arg-type]


def test_strip_frames_are_spread_and_prefer_keyframes() -> None:
    assert strip_indices(100, [], 5) == [10, 30, 50, 70, 90]  # the middle of each fifth
    assert strip_indices(24, [0, 12], 5) == [0, 7, 12, 16, 21]  # a keyframe in its fifth
    assert strip_indices(180, range(0, 180, 60), 5) == [0, 60, 90, 120, 162]
    assert strip_indices(3, [0], 5) == [0, 1, 2]  # a short video: each frame once
    assert strip_indices(1, [], 5) == [0]


def test_a_strip_holds_the_planned_frames_side_by_side(packed: Packed) -> None:
    key = sorted(packed.videos)[0]
    info = packed.facts[key]
    strip, n, got = video_strip(packed.videos[key], info, where=key)
    assert got == info and n == STRIP_FRAMES
    assert strip.shape == (64, STRIP_FRAMES * 96, 3) and strip.dtype == np.uint8
    frames = np.split(strip, n, axis=1)
    assert [frame_index(f) for f in frames] == strip_indices(info.frames, info.keyframes)
    wide, _, _ = video_strip(video_bytes(10, VideoSettings(width=640, height=360)), None, "x")
    assert wide.shape == (144, STRIP_FRAMES * 256, 3)  # each frame a 256 px thumbnail


def test_report_shows_every_video_as_a_strip_with_its_facts(packed: Packed, tmp_path) -> None:
    out, png = tmp_path / "report", tmp_path / "sheet.png"
    got = build_report(
        str(packed.shards), ShowConfig(samples=50, **QUICK), out_dir=str(out), png=str(png)
    )
    assert got["every_sample"] and len(got["samples"]) == VIDEOS
    page = (out / "index.html").read_text(encoding="utf-8")
    for s in got["samples"]:
        key, n = s["key"], s["n"]
        info = packed.facts[key]
        assert s["problems"] == [] and s["image"] is None and s["members"] == ["mp4", "cls", "json"]
        assert s["video"] == {"ext": "mp4", "format": "mp4", "nbytes": len(packed.videos[key])} | {
            k: v for k, v in info.to_json().items() if k != "keyframes"
        }
        with Image.open(out / "thumbs" / f"{n:04d}.jpg") as strip:
            assert strip.size == (STRIP_FRAMES * 96, 64)  # 5 frames x a 96x64 thumbnail
        assert (out / "videos" / f"{n:04d}.mp4").read_bytes() == packed.videos[key]
        assert f'href="videos/{n:04d}.mp4"' in page
        assert f"{info.duration:.2f} s, 24 fps, {info.frames} frames, no audio" in page
    assert not (out / "images").exists() and not (out / "views").exists()
    stats = got["statistics"]
    assert stats["formats"] == [{"name": "mp4 h264", "count": VIDEOS}]
    assert stats["members"] == [{"name": "mp4+cls+json", "count": VIDEOS}]
    videos = stats["videos"]
    assert videos["videos"] == VIDEOS and videos["unknown"] == 0
    assert sorted(videos["durations"]) == sorted(
        round(i.duration, 3) for i in packed.facts.values()
    )
    assert (out / "charts" / "videos.svg").is_file() and "Video lengths" in page
    with Image.open(png) as sheet:  # each video's middle frame
        assert sheet.size[0] > 0 and np.asarray(sheet).std() > 20


def test_walks_take_video_facts_from_the_json_and_skip_the_video(packed: Packed) -> None:
    """Two samples shown, the others' headers walked: every video is counted with its facts,
    and the walked videos are not read (with no pictures asked for, nothing is decoded)."""
    got = build_report(str(packed.shards), ShowConfig(samples=2, header_samples=4, **QUICK))
    assert not got["every_sample"] and len(got["samples"]) == 2
    stats = got["statistics"]
    assert stats["sampled"] == stats["videos"]["videos"] > 2
    assert stats["videos"]["unknown"] == 0
    assert stats["formats"] == [{"name": "mp4 h264", "count": stats["sampled"]}]
    alone = build_report(str(packed.shards), ShowConfig(samples=2, header_samples=0, **QUICK))
    assert [s["key"] for s in alone["samples"]] == [s["key"] for s in got["samples"]]
    walked = stats["sampled"] - alone["statistics"]["sampled"]
    smallest = min(len(v) for v in packed.videos.values())
    assert walked > 0
    assert got["reads"]["bytes"] - alone["reads"]["bytes"] < walked * smallest / 2  # ~3 KB
    for s in got["samples"]:
        assert s["video"]["frames"] == packed.facts[s["key"]].frames


def test_a_video_that_does_not_decode_is_reported_not_raised(packed: Packed, tmp_path) -> None:
    """One video's bytes zeroed after its container's first box (the tar intact): its tile
    says why, the others keep their strips."""
    shards = tmp_path / "shards"
    shutil.copytree(packed.shards, shards)
    first = sorted(shards.glob("*.tar"))[0]
    with tarfile.open(first) as tf:
        m = next(m for m in tf.getmembers() if m.name.endswith(".mp4"))
    bad = m.name.split(".", 1)[0]
    data = bytearray(first.read_bytes())
    data[m.offset_data + 32 : m.offset_data + m.size] = bytes(m.size - 32)
    first.write_bytes(bytes(data))
    assert video_kind(bytes(data[m.offset_data :])) == "mp4"

    out = tmp_path / "report"
    got = build_report(str(shards), ShowConfig(samples=50, **QUICK), out_dir=str(out))
    by_key = {s["key"]: s for s in got["samples"]}
    assert len(by_key) == VIDEOS
    problem = by_key[bad]["problems"]
    assert len(problem) == 1 and bad in problem[0] and "video" in problem[0]
    assert not (out / "thumbs" / f"{by_key[bad]['n']:04d}.jpg").exists()
    assert all(s["problems"] == [] for k, s in by_key.items() if k != bad)
    assert len(list((out / "thumbs").iterdir())) == VIDEOS - 1
    page = (out / "index.html").read_text(encoding="utf-8")
    assert 'class="nopic"' in page and "not a readable video" in page


def test_videos_without_facts_are_read_from_their_header(tmp_path) -> None:
    """A foreign shard (no KEY.json): the video's facts come from its header when shown."""
    videos = [video_bytes(30), video_bytes(20, i=1)]
    write_shards(tmp_path / "shards", videos, facts=False)
    out = tmp_path / "report"
    got = build_report(str(tmp_path / "shards"), ShowConfig(samples=10, **QUICK), out_dir=str(out))
    assert [s["video"]["frames"] for s in got["samples"]] == [30, 20]
    assert got["statistics"]["videos"]["unknown"] == 2  # walked facts: none in the shard
    for s, data in zip(got["samples"], videos, strict=True):
        assert s["video"]["duration"] == round(probe_video(data).duration, 6)
        with Image.open(out / "thumbs" / f"{s['n']:04d}.jpg") as strip:
            assert strip.size == (STRIP_FRAMES * 96, 64)
    assert "1.25 s, 24 fps, 30 frames" in (out / "index.html").read_text(encoding="utf-8")
