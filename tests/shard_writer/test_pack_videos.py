"""Videos in ``pack``, ``verify`` and ``inspect``: real videos (H.264 mp4, VP9 webm) encoded into
tmp_path, packed by the real pack, read back with ``tarfile``."""

from __future__ import annotations

import hashlib
import json
import logging
import tarfile
from pathlib import Path

import pytest

from shard_writer.members import sample_bound, sample_members
from shard_writer.pack import PackOptions, pack
from shard_writer.probe import EncodeOptions, probe_one
from shard_writer.sample_videos import VideoSettings, encode_video
from shard_writer.scan import scan_imagefolder
from tests.conftest import dir_bytes, jpeg_bytes, make_tree, run_cli
from tests.support.videos import shard_samples
from wdstool.base.errors import InputError
from wdstool.format.manifest import MANIFEST_NAME
from wdstool.format.tar_write import END, member_bytes
from wdstool.format.video import VIDEO_EXTENSIONS, probe_video, video_kind

SMALL = VideoSettings(width=64, height=48, fps=10, gop=5)


def _video(frames: int, settings: VideoSettings = SMALL, i: int = 0) -> bytes:
    return encode_video(frames, settings, seed=3, i=i)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Images and videos mixed (class a), videos alone (class b: H.264 with audio, VP9, and one
    over 128 KiB, whose probe reads more than the head and tail an image's does)."""
    root = make_tree(tmp_path_factory.mktemp("videos") / "src", {"a": 2})
    (root / "a" / "clip.mp4").write_bytes(_video(20))
    (root / "b").mkdir()
    (root / "b" / "talk.mp4").write_bytes(
        _video(15, VideoSettings(**{**_s(SMALL), "audio": 16000}))
    )
    (root / "b" / "pan.webm").write_bytes(
        _video(25, VideoSettings(**{**_s(SMALL), "codec": "vp9"}))
    )
    big = _video(90, VideoSettings(width=160, height=120, fps=30, gop=15, crf=2), i=4)
    assert len(big) > 2 * 65536
    (root / "b" / "zbig.mp4").write_bytes(big)
    return root


def _s(settings: VideoSettings) -> dict:
    return {k: getattr(settings, k) for k in settings.__dataclass_fields__}


def _pack(src: Path, dest: Path, **kw) -> dict:
    return pack(str(src), str(dest), PackOptions(workers=1, **kw)).to_json()


def test_members_and_facts_are_the_sources(
    tree: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="shard_writer.pack"):
        summary = _pack(tree, tmp_path / "ds", max_count=3)
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "3 formats (3 KEY.mp4, 2 KEY.jpg, 1 KEY.webm)" in warned
    assert "image or video members" in warned and "quality=Q" not in warned
    samples = shard_samples(tmp_path / "ds")
    assert len(samples) == summary["samples"] == 6 and summary["skipped"] == []
    kinds = []
    for parts in samples.values():
        meta = json.loads(parts["json"])
        source = (tree / meta["path"]).read_bytes()
        media = [e for e in parts if e not in ("json", "cls")]
        assert len(media) == 1 and parts[media[0]] == source  # the original bytes, never re-encoded
        assert parts["cls"] == str(meta["class_index"]).encode()
        if media[0] in VIDEO_EXTENSIONS:
            facts = probe_video(source)
            assert media[0] == video_kind(source) == meta["format"]
            assert meta["video"] == facts.to_json()
            assert (meta["video"]["frames"], meta["video"]["keyframes"]) == (
                facts.frames,
                list(facts.keyframes),
            )
            assert (meta["width"], meta["height"]) == (facts.width, facts.height)
            kinds.append(media[0])
        else:
            assert "video" not in meta and media[0] == "jpg"
    assert sorted(kinds) == ["mp4", "mp4", "mp4", "webm"]
    talk = next(json.loads(p["json"]) for p in samples.values() if b"talk" in p["json"])
    assert talk["video"]["audio_rate"] == 16000 and talk["video"]["frames"] == 15
    videos = [p for p in sorted(tree.rglob("*")) if p.suffix in (".mp4", ".webm")]
    seconds = sum(probe_video(p.read_bytes()).duration for p in videos)
    assert summary["videos"] == {"count": 4, "seconds": round(seconds, 3)}


def test_scan_keeps_videos_in_imagefolder_order(tree: Path) -> None:
    scan = scan_imagefolder(tree)
    assert scan.classes == ("a", "b") and scan.problems == ()
    assert [f.relpath for f in scan.files] == [
        "a/clip.mp4",
        "a/img_0000.jpg",
        "a/img_0001.jpg",
        "b/pan.webm",
        "b/talk.mp4",
        "b/zbig.mp4",
    ]
    assert [f.class_idx for f in scan.files] == [0, 0, 0, 1, 1, 1]


def test_the_bytes_decide_not_the_name(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    (root / "a" / "really_a_video.jpg").write_bytes(_video(10))
    (root / "a" / "really_an_image.webm").write_bytes(jpeg_bytes(5))
    _pack(root, tmp_path / "ds")
    exts = {
        json.loads(p["json"])["path"]: sorted(set(p) - {"json", "cls"})
        for p in shard_samples(tmp_path / "ds").values()
    }
    assert exts == {"a/really_a_video.jpg": ["mp4"], "a/really_an_image.webm": ["jpg"]}


def test_bad_videos_are_skipped_with_their_reason(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    good = _video(20)
    (root / "a" / "good.mp4").write_bytes(good)
    (root / "a" / "half.mp4").write_bytes(good[: len(good) // 2])
    (root / "a" / "notes.mp4").write_bytes(b"these are notes, not a video\n" * 20)
    summary = _pack(root, tmp_path / "ds")
    reasons = {s["path"]: s["reason"] for s in summary["skipped"]}
    assert reasons == {
        "a/half.mp4": "not a readable video container (Invalid data found when processing input)",
        "a/notes.mp4": "not a video (unrecognised container)",
    }
    manifest = json.loads((tmp_path / "ds" / MANIFEST_NAME).read_text())
    assert [s["path"] for s in manifest["skipped"]] == ["a/half.mp4", "a/notes.mp4"]
    assert summary["samples"] == 1 and manifest["videos"]["count"] == 1

    with pytest.raises(InputError, match=r"half\.mp4: not a readable video container"):
        pack(str(root), str(tmp_path / "fail"), PackOptions(workers=1, on_error="raise"))
    r = run_cli("pack", str(root), str(tmp_path / "cli"), "--on-error", "fail", check=False)
    assert r.returncode != 0 and "half.mp4" in r.stderr and "video container" in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert not (tmp_path / "cli" / MANIFEST_NAME).exists()


def test_reencode_options_leave_videos_as_they_are(tree: Path, tmp_path: Path) -> None:
    _pack(tree, tmp_path / "ds", max_side=16, quality=50, verify_decode=True)
    for parts in shard_samples(tmp_path / "ds").values():
        meta = json.loads(parts["json"])
        source = (tree / meta["path"]).read_bytes()
        media = next(e for e in parts if e not in ("json", "cls"))
        if "video" in meta:
            assert parts[media] == source
        else:  # the images are re-encoded: the options did act
            assert parts[media] != source and meta["width"] == 16


def test_pack_twice_and_resume_give_the_same_bytes(tree: Path, tmp_path: Path) -> None:
    _pack(tree, tmp_path / "one", max_count=2)
    pack(str(tree), str(tmp_path / "two"), PackOptions(workers=2, max_count=2))
    assert dir_bytes(tmp_path / "one") == dir_bytes(tmp_path / "two")
    rerun = _pack(tree, tmp_path / "one", max_count=2)
    assert rerun["up_to_date"] and rerun["videos"]["count"] == 4

    class Interrupt(Exception):
        pass

    def stop_after_a_shard(_n: int, _nbytes: int, shards: int) -> None:
        if shards:
            raise Interrupt

    with pytest.raises(Interrupt):
        pack(
            str(tree),
            str(tmp_path / "three"),
            PackOptions(workers=1, max_count=2),
            progress=stop_after_a_shard,
        )
    assert not (tmp_path / "three" / MANIFEST_NAME).exists()
    again = _pack(tree, tmp_path / "three", max_count=2)
    assert again["reused_shards"] == 1 and again["written_shards"] == 2
    assert dir_bytes(tmp_path / "three") == dir_bytes(tmp_path / "one")


def test_layout_reserves_a_video_with_many_keyframes(tmp_path: Path) -> None:
    """300 keyframes make KEY.json ~1.3 KB: more than an image's reserve. With the shard size
    one byte short of two such samples, each shard must hold one of them."""
    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    data = _video(300, VideoSettings(width=64, height=48, fps=100, gop=1))
    for i in range(3):
        (root / "a" / f"v{i}.mp4").write_bytes(data)
    scan = scan_imagefolder(root)
    f = scan.files[0]
    info = probe_one(str(root), f, EncodeOptions())
    assert len(json.loads(info.video)["keyframes"]) == 300
    actual = sum(member_bytes(len(b)) for _, b in sample_members(f, info, "k" * 9, data, ("a",)))
    assert sample_bound(f, info.payload_size, ("a",), info.video) >= actual
    assert sample_bound(f, info.payload_size, ("a",)) < actual  # what an image would reserve

    max_size = len(END) + 2 * actual - 1
    _pack(root, tmp_path / "ds", max_size=max_size, shuffle=False)
    shards = sorted((tmp_path / "ds").glob("*.tar"))
    assert len(shards) == 3 and all(s.stat().st_size <= max_size for s in shards)


def _corrupt_member(shard: Path, key: str, keep: int) -> None:
    """Overwrite a member's data after its first ``keep`` bytes with zeros (same size), and
    give the manifest the shard's new sha256, so only a check of the member itself sees it."""
    with tarfile.open(shard) as tar:
        m = next(m for m in tar.getmembers() if m.name.split(".")[0] == key)
    data = bytearray(shard.read_bytes())
    data[m.offset_data + keep : m.offset_data + m.size] = bytes(m.size - keep)
    shard.write_bytes(bytes(data))
    index = shard.parent / MANIFEST_NAME
    manifest = json.loads(index.read_text())
    for entry in manifest["shardlist"]:
        if entry["url"] == shard.name:
            entry["sha256"] = hashlib.sha256(data).hexdigest()
    index.write_text(json.dumps(manifest))


def _a_video_key(dest: Path) -> tuple[Path, str]:
    for shard in sorted(dest.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for name in tar.getnames():
                key, ext = name.split(".", 1)
                if ext == "mp4":
                    return shard, key
    raise AssertionError("no mp4 member")


def test_verify_decode_probes_videos_and_names_a_bad_one(tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "ds"
    _pack(tree, dest, max_count=3)
    ok = run_cli("verify", str(dest), "--decode")
    assert "ok: 2 shards, 6 samples (4 videos)" in ok.stdout and "videos probed" in ok.stdout
    report = json.loads(run_cli("verify", str(dest), "--json").stdout)
    assert report["num_videos"] == 4

    shard, key = _a_video_key(dest)
    _corrupt_member(shard, key, keep=64)  # still sniffs as mp4; no longer a readable video
    run_cli("verify", str(dest))  # sizes, sha256 and layout agree: only a probe sees it
    r = run_cli("verify", str(dest), "--decode", check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert f"{shard}: sample {key!r}: .mp4 member: not a readable video container" in r.stderr
    assert r.stderr.strip().count("\n") == 0

    _corrupt_member(shard, key, keep=0)  # not even a container: verify without --decode sees it
    r = run_cli("verify", str(dest), check=False)
    assert r.returncode != 0
    assert f"{shard}: sample {key!r}: .mp4 member is not a video" in r.stderr


def test_inspect_counts_videos_and_append_adds_them(tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "ds"
    summary = _pack(tree, dest)
    info = json.loads(run_cli("inspect", str(dest), "--json").stdout)
    assert info["num_videos"] == 4 and info["video_seconds"] == summary["videos"]["seconds"]
    assert "videos    4" in run_cli("inspect", str(dest)).stdout

    more = tmp_path / "more"
    (more / "c").mkdir(parents=True)
    (more / "c" / "x.mp4").write_bytes(_video(30, i=9))
    pack(str(more), str(dest), PackOptions(workers=1, append=True))
    info = json.loads(run_cli("inspect", str(dest), "--json").stdout)
    assert info["num_videos"] == 5
    assert info["video_seconds"] == round(summary["videos"]["seconds"] + 3.0, 3)

    index = dest / MANIFEST_NAME  # a manifest that records none (another writer's)
    manifest = json.loads(index.read_text())
    del manifest["videos"]
    index.write_text(json.dumps(manifest))
    info = json.loads(run_cli("inspect", str(dest), "--json", "--keys", "6").stdout)
    assert info["num_videos"] is None


def test_image_only_data_sets_record_no_videos(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a": 3})
    summary = _pack(src, tmp_path / "ds")
    assert "videos" not in summary
    assert "videos" not in json.loads((tmp_path / "ds" / MANIFEST_NAME).read_text())
    info = json.loads(run_cli("inspect", str(tmp_path / "ds"), "--json").stdout)
    assert info["num_videos"] == 0 and info["video_seconds"] == 0


def test_listing_with_a_video_column(tmp_path: Path) -> None:
    (tmp_path / "clips").mkdir()
    (tmp_path / "clips" / "one.mp4").write_bytes(_video(10))
    (tmp_path / "clips" / "two.webm").write_bytes(
        _video(12, VideoSettings(**{**_s(SMALL), "codec": "vp9"}))
    )
    listing = tmp_path / "list.csv"
    listing.write_text("video,label,note\nclips/one.mp4,run,a\nclips/two.webm,jump,b\n")
    summary = _pack(listing, tmp_path / "ds", shuffle=False)
    assert summary["samples"] == 2 and summary["videos"]["count"] == 2
    metas = [json.loads(p["json"]) for p in shard_samples(tmp_path / "ds").values()]
    assert [(m["path"], m["format"], m["class"], m["note"]) for m in metas] == [
        ("clips/one.mp4", "mp4", "run", "a"),
        ("clips/two.webm", "webm", "jump", "b"),
    ]
    assert all("video" in m and m["video"]["frames"] in (10, 12) for m in metas)
