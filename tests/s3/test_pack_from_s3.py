"""`wdstool pack s3://.../images DEST`: SRC on an object store, listed once, read with ranged
GETs, packed into the same bytes as the same tree on local disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shard_writer.scan import scan_imagefolder
from tests.conftest import dir_bytes, make_tree, run_cli

pytestmark = pytest.mark.slow


def upload_tree(s3_server, tree: Path, bucket: str, prefix: str) -> str:
    client = s3_server.client()
    for path in sorted(tree.rglob("*")):
        if path.is_file():
            key = f"{prefix}/{path.relative_to(tree).as_posix()}"
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
    return f"s3://{bucket}/{prefix}"


@pytest.fixture
def odd_tree(tmp_path: Path) -> Path:
    return make_odd_tree(tmp_path)


def make_odd_tree(tmp_path: Path) -> Path:
    """Classes with nested folders, names that sort differently as paths and as strings,
    a big image (head+tail probe), a non-image, a file outside any class, a broken image."""
    from tests.conftest import jpeg_bytes

    root = make_tree(tmp_path / "src", {"b": 5, "a-x": 4, "a": 6}, seed=3)
    (root / "a" / "sub").mkdir()
    (root / "a" / "sub" / "z.jpg").write_bytes(jpeg_bytes(77))
    (root / "a" / "sub.d").mkdir()
    (root / "a" / "sub.d" / "y.JPG").write_bytes(jpeg_bytes(78))
    (root / "a" / "big.jpg").write_bytes(jpeg_bytes(79, size=(900, 700), quality=100))
    assert (root / "a" / "big.jpg").stat().st_size > 2 * 65536
    (root / "b" / "notes.txt").write_text("not an image")
    (root / "b" / "broken.jpg").write_bytes(jpeg_bytes(80)[:300])
    (root / "README.jpg").write_bytes(jpeg_bytes(81))
    return root


def test_remote_scan_lists_in_imagefolder_order(odd_tree: Path, s3_server, s3_bucket) -> None:
    url = upload_tree(s3_server, odd_tree, s3_bucket, "data/images")
    local = scan_imagefolder(odd_tree)
    remote = scan_imagefolder(url + "/", s3_server.storage_options)
    assert remote.classes == local.classes
    assert [(f.relpath, f.class_idx, f.size) for f in remote.files] == [
        (f.relpath, f.class_idx, f.size) for f in local.files
    ]


@pytest.mark.parametrize("extra", [[], ["--max-side", "48"]], ids=["stored", "reencoded"])
def test_pack_from_s3_equals_pack_from_disk(
    odd_tree: Path, tmp_path: Path, s3_server, s3_bucket, extra: list[str]
) -> None:
    url = upload_tree(s3_server, odd_tree, s3_bucket, "images")
    common = ["--max-count", "4", "--workers", "2", "--json", *extra]
    ref = json.loads(run_cli("pack", str(odd_tree), str(tmp_path / "ref"), *common).stdout)
    env = {k: v for k, v in s3_server.env.items() if k != "AWS_ENDPOINT_URL"}
    ep = ["--endpoint-url", s3_server.endpoint_url]
    got = json.loads(run_cli("pack", url, str(tmp_path / "got"), *common, *ep, env=env).stdout)
    assert got["samples"] == ref["samples"] and got["skipped"] == ref["skipped"]
    assert [s["path"] for s in got["skipped"]] == ["b/broken.jpg"]
    assert dir_bytes(tmp_path / "got") == dir_bytes(tmp_path / "ref")


def test_missing_source_bucket_is_one_line(tmp_path: Path, s3_server) -> None:
    env = {k: v for k, v in s3_server.env.items() if k != "AWS_ENDPOINT_URL"}
    r = run_cli(
        "pack",
        "s3://no-such-bucket-here/images",
        str(tmp_path / "out"),
        "--endpoint-url",
        s3_server.endpoint_url,
        check=False,
        env=env,
    )
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "s3://no-such-bucket-here/images" in err[0], r.stderr
    assert not (tmp_path / "out").exists()


def test_videos_from_s3_equal_videos_from_disk(tmp_path: Path, s3_server, s3_bucket) -> None:
    """Videos beside images and alone, one over 128 KiB (read whole after the probe's head):
    listed in ImageFolder order and packed into the same bytes as from disk."""
    from shard_writer.sample_videos import VideoSettings, encode_video

    small = VideoSettings(width=64, height=48, fps=10, gop=5)
    root = make_tree(tmp_path / "src", {"a": 2})
    (root / "a" / "clip.mp4").write_bytes(encode_video(20, small))
    (root / "b").mkdir()
    (root / "b" / "pan.webm").write_bytes(
        encode_video(15, VideoSettings(width=64, height=48, fps=10, gop=5, codec="vp9"), i=1)
    )
    big = encode_video(90, VideoSettings(width=160, height=120, fps=30, gop=15, crf=2), i=2)
    assert len(big) > 2 * 65536
    (root / "b" / "big.mp4").write_bytes(big)
    url = upload_tree(s3_server, root, s3_bucket, "videos")
    common = ["--max-count", "3", "--json"]
    ref = json.loads(run_cli("pack", str(root), str(tmp_path / "ref"), *common).stdout)
    env = {k: v for k, v in s3_server.env.items() if k != "AWS_ENDPOINT_URL"}
    ep = ["--endpoint-url", s3_server.endpoint_url]
    got = json.loads(run_cli("pack", url, str(tmp_path / "got"), *common, *ep, env=env).stdout)
    assert got["samples"] == ref["samples"] == 5 and got["skipped"] == []
    assert got["videos"] == ref["videos"] and got["videos"]["count"] == 3
    assert dir_bytes(tmp_path / "got") == dir_bytes(tmp_path / "ref")
