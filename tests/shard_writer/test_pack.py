"""pack on real files: labels, readers, reproducibility, limits, destinations."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest
import torchvision
import webdataset as wds

from shard_writer.pack import PackOptions, pack
from tests.conftest import dir_bytes, jpeg_bytes, make_tree, run_cli
from wdstool.base.errors import ConfigError, DestinationError, InputError


def _manifest(dest: Path) -> dict:
    return json.loads((dest / "index.json").read_text())


def test_class_order_and_labels_match_torchvision(tmp_path: Path) -> None:
    # names chosen so that naive or case-insensitive sorting would differ from torchvision's
    src = make_tree(tmp_path / "src", {"b": 2, "B": 2, "_x": 1, "a10": 1, "a9": 2})
    (src / "a9" / "nested").mkdir()
    (src / "a9" / "nested" / "deep.JPG").write_bytes(jpeg_bytes(99))
    (src / "a9" / "UPPER.JpEg").write_bytes(jpeg_bytes(98))
    (src / "a9" / "notes.txt").write_text("not an image")
    dest = tmp_path / "out"
    pack(str(src), str(dest), PackOptions(workers=1, max_count=3))

    tv = torchvision.datasets.ImageFolder(str(src))
    m = _manifest(dest)
    assert m["classes"] == tv.classes
    expected = {Path(p).relative_to(src).as_posix(): label for p, label in tv.samples}
    got = {}
    for entry in m["shardlist"]:
        for sample in wds.WebDataset(str(dest / entry["url"]), shardshuffle=False):
            meta = json.loads(sample["json"])
            got[meta["path"]] = int(sample["cls"])
            assert meta["class"] == tv.classes[int(sample["cls"])]
            assert "." not in sample["__key__"]
    assert got == expected
    assert m["num_samples"] == len(tv.samples) == sum(e["nsamples"] for e in m["shardlist"])


def test_upstream_webdataset_reads_every_sample(small_tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    pack(str(small_tree), str(dest), PackOptions(workers=1, max_count=5))
    m = _manifest(dest)
    assert m["__kind__"] == "wids-shard-index-v1" and m["wids_version"] == 1
    urls = [str(dest / e["url"]) for e in m["shardlist"]]
    ds = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls", "json")
    n = 0
    for img, cls, meta in ds:
        assert img.size == (meta["width"], meta["height"]) == (64, 48)
        assert meta["class"] == m["classes"][cls]
        n += 1
    assert n == 16 == m["num_samples"]
    # pack-time shuffle: the first shard is not a single class
    first = [json.loads(s["json"])["class"] for s in wds.WebDataset(urls[0], shardshuffle=False)]
    assert len(set(first)) > 1


def test_tar_tf_lists_members(small_tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    pack(str(small_tree), str(dest), PackOptions(workers=1))
    shard = dest / _manifest(dest)["shardlist"][0]["url"]
    names = subprocess.run(["tar", "-tf", str(shard)], capture_output=True, text=True, check=True)
    members = names.stdout.split()
    assert len(members) == 3 * 16
    assert {m.rsplit(".", 1)[1] for m in members} == {"jpg", "cls", "json"}
    with tarfile.open(shard) as tf:
        for info in tf:
            assert info.mtime == 0 and info.uid == 0 and info.mode == 0o444 and info.isreg()


def test_byte_identical_whatever_the_workers(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {f"c{i}": 9 for i in range(4)})
    a, b = tmp_path / "a", tmp_path / "b"
    pack(str(src), str(a), PackOptions(workers=1, max_count=4))
    pack(str(src), str(b), PackOptions(workers=2, max_count=4))
    assert dir_bytes(a) == dir_bytes(b)
    assert len(_manifest(a)["shardlist"]) == 9
    assert not (a / ".wdstool-pack").exists()


def test_different_seed_or_no_shuffle_changes_layout(small_tree: Path, tmp_path: Path) -> None:
    pack(str(small_tree), str(tmp_path / "s0"), PackOptions(workers=1, seed=0))
    pack(str(small_tree), str(tmp_path / "s1"), PackOptions(workers=1, seed=1))
    pack(str(small_tree), str(tmp_path / "ns"), PackOptions(workers=1, shuffle=False))
    assert dir_bytes(tmp_path / "s0") != dir_bytes(tmp_path / "s1")
    keys = [
        s["__key__"]
        for s in wds.WebDataset(str(tmp_path / "ns" / "train-000000.tar"), shardshuffle=False)
    ]
    assert keys == sorted(keys)  # ImageFolder order


def test_max_size_and_max_count_are_respected(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a": 20, "b": 20})
    dest = tmp_path / "out"
    limit = 12_000
    pack(str(src), str(dest), PackOptions(workers=2, max_size=limit, max_count=7))
    m = _manifest(dest)
    for e in m["shardlist"]:
        size = (dest / e["url"]).stat().st_size
        assert size == e["filesize"]
        assert size <= limit or e["nsamples"] == 1
        assert 1 <= e["nsamples"] <= 7
    assert m["num_samples"] == 40


def test_single_sample_larger_than_max_size_gets_its_own_shard(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a": 3})
    (src / "a" / "big.jpg").write_bytes(jpeg_bytes(5, size=(400, 300), quality=100))
    dest = tmp_path / "out"
    pack(str(src), str(dest), PackOptions(workers=1, max_size=9000))
    m = _manifest(dest)
    assert m["num_samples"] == 4
    big = [e for e in m["shardlist"] if e["filesize"] > 9000]
    assert len(big) == 1 and big[0]["nsamples"] == 1


def test_reencode_downscales_and_stays_reproducible(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a": 3, "b": 3})
    (src / "a" / "big.png").write_bytes(
        __import__("tests.conftest").conftest.png_bytes(1, (300, 200))
    )
    a, b = tmp_path / "a", tmp_path / "b"
    pack(str(src), str(a), PackOptions(workers=1, max_side=32, quality=80, max_size=8000))
    pack(str(src), str(b), PackOptions(workers=2, max_side=32, quality=80, max_size=8000))
    assert dir_bytes(a) == dir_bytes(b)
    for e in _manifest(a)["shardlist"]:
        assert (a / e["url"]).stat().st_size <= 8000 or e["nsamples"] == 1
        for s in wds.WebDataset(str(a / e["url"]), shardshuffle=False).decode("pil"):
            assert "jpg" in s and max(s["jpg"].size) <= 32


def test_dest_with_other_dataset_is_refused_unless_overwrite(
    small_tree: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "out"
    pack(str(small_tree), str(dest), PackOptions(workers=1, seed=0))
    with pytest.raises(DestinationError, match="already holds a different dataset"):
        pack(str(small_tree), str(dest), PackOptions(workers=1, seed=7))
    pack(str(small_tree), str(dest), PackOptions(workers=1, seed=7, overwrite=True, max_count=3))
    m = _manifest(dest)
    assert m["pack_options"]["seed"] == 7
    on_disk = sorted(p.name for p in dest.glob("*.tar"))
    assert on_disk == sorted(e["url"] for e in m["shardlist"])  # no stale shard left behind


def test_rerun_of_complete_pack_is_a_no_op(small_tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    first = pack(str(small_tree), str(dest), PackOptions(workers=1))
    before = dir_bytes(dest)
    again = pack(str(small_tree), str(dest), PackOptions(workers=1))
    assert again.up_to_date and again.samples == first.samples
    assert dir_bytes(dest) == before


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    missing = run_cli("pack", str(tmp_path / "nope"), str(tmp_path / "out"), check=False)
    assert missing.returncode != 0
    assert missing.stderr.strip().count("\n") == 0 and "no such directory" in missing.stderr
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "x.jpg").write_bytes(jpeg_bytes(1))
    r = run_cli("pack", str(flat), str(tmp_path / "out"), check=False)
    assert r.returncode != 0 and "not an ImageFolder" in r.stderr and "Traceback" not in r.stderr
    empty = tmp_path / "empty"
    (empty / "cls").mkdir(parents=True)
    (empty / "cls" / "readme.txt").write_text("x")
    r = run_cli("pack", str(empty), str(tmp_path / "out"), check=False)
    assert r.returncode != 0 and "no images" in r.stderr
    assert not (tmp_path / "out" / "index.json").exists()
    r = run_cli("pack", str(empty), str(tmp_path / "out"), "--max-size", "lots", check=False)
    assert r.returncode == 2 and "not a size" in r.stderr


def test_bad_options_raise_config_error() -> None:
    with pytest.raises(ConfigError):
        PackOptions(prefix="a/b")
    with pytest.raises(ConfigError):
        PackOptions(max_size=10)
    with pytest.raises(InputError):
        pack("/definitely/not/here", "/tmp/x")


def test_cli_pack_json_inspect_verify(small_tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    r = run_cli("pack", str(small_tree), str(dest), "--json", "--max-count", "6")
    summary = json.loads(r.stdout)
    assert summary["samples"] == 16 and summary["shards"] == 3 and summary["skipped"] == []
    info = json.loads(run_cli("inspect", str(dest), "--json").stdout)
    assert info["num_samples"] == 16 and len(info["sample_keys"]) == 5
    assert info["classes"] == ["cat", "dog", "emu"]
    out = run_cli("verify", str(dest), "--decode").stdout
    assert "ok: 3 shards, 16 samples" in out
