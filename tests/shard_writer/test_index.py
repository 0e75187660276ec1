"""`wdstool index DEST --dali`: one DALI index file per shard, from index.json and tar headers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from shard_writer.index import index_location, scan_dali_index, write_dali_indexes
from shard_writer.pack import PackOptions, pack
from tests.conftest import jpeg_bytes, run_cli
from tests.support.dali_idx import check_index_against_tar
from wdstool.base.errors import ShardError
from wdstool.format.manifest import parse_manifest


@pytest.fixture
def packed(small_tree: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "ds"
    pack(str(small_tree), str(dest), PackOptions(workers=1, max_count=6))
    return dest


def shardlist(dest: Path) -> list[dict]:
    return json.loads((dest / "index.json").read_text())["shardlist"]


def visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_cli_writes_one_index_per_shard_next_to_it(packed: Path) -> None:
    r = run_cli("index", str(packed), "--dali", "--json")
    summary = json.loads(r.stdout)
    shards = shardlist(packed)
    assert summary["num_shards"] == len(shards) == 3
    assert summary["num_samples"] == 16 and summary["num_members"] == 48
    assert summary["format"] == "dali-webdataset-index v1.2"
    assert summary["index_files"] == [
        f"{packed}/{e['url'].removesuffix('.tar')}.idx" for e in shards
    ]
    # nothing else appeared: no temporary file left behind
    assert visible(packed) == sorted(
        ["index.json", "index.offsets.npy"]
        + [e["url"] for e in shards]
        + [e["url"].replace(".tar", ".idx") for e in shards]
    )
    keys = []
    for e in shards:
        tar = (packed / e["url"]).read_bytes()
        text = (packed / e["url"].replace(".tar", ".idx")).read_text()
        samples = check_index_against_tar(text, tar)
        assert len(samples) == e["nsamples"]
        for s in samples:  # several members per sample: KEY.jpg, KEY.cls, KEY.json
            assert [c.ext for c in s] == ["jpg", "cls", "json"]
            assert len({c.filename.split(".")[0] for c in s}) == 1
            keys.append(s[0].filename.split(".")[0])
    assert len(set(keys)) == 16


def test_out_dir_gets_the_same_files_and_the_shard_folder_nothing(
    packed: Path, tmp_path: Path
) -> None:
    before = visible(packed)
    out = tmp_path / "idx" / "nested"
    r = run_cli("index", str(packed / "index.json"), "--dali", "--out", str(out))
    assert visible(packed) == before
    names = [e["url"].replace(".tar", ".idx") for e in shardlist(packed)]
    assert visible(out) == sorted(names)
    assert "wrote 3 DALI index files (16 samples, 48 members) under" in r.stdout
    run_cli("index", str(packed), "--dali", "-q")
    for name in names:
        assert (out / name).read_bytes() == (packed / name).read_bytes()


def test_rerun_replaces_a_stale_index(packed: Path) -> None:
    idx = packed / shardlist(packed)[0]["url"].replace(".tar", ".idx")
    idx.write_text("v1.2 1\njpg 0 1 stale.jpg\n")
    write_dali_indexes(str(packed))
    check_index_against_tar(idx.read_text(), (packed / shardlist(packed)[0]["url"]).read_bytes())


def test_header_only_scan_reads_a_sliver_of_a_local_shard(tmp_path: Path) -> None:
    """Measured at the system-call level (/proc/self/io rchar): member data is seeked past."""
    src = tmp_path / "big"
    for i in range(16):
        d = src / f"c{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"im{i}.jpg").write_bytes(jpeg_bytes(i, size=(480, 360), quality=95))
    dest = tmp_path / "ds"
    pack(str(src), str(dest), PackOptions(workers=1))
    manifest = parse_manifest((dest / "index.json").read_bytes(), "index.json")
    entry = manifest.shards[0]
    assert entry.filesize > 1_000_000

    def rchar() -> int:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
        raise AssertionError("no rchar")

    before = rchar()
    index = scan_dali_index(str(dest / entry.url), entry)
    read = rchar() - before
    assert index.samples == 16 and index.members == 48
    assert read <= 512 * (48 + 2) + 4096, f"{read} bytes read for 48 headers"


def test_missing_manifest_and_flag_are_one_line_errors(tmp_path: Path) -> None:
    r = run_cli("index", str(tmp_path / "nothing"), "--dali", check=False)
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"Error: {tmp_path}/nothing/index.json: no manifest found, and no .tar shards there "
        "(index a dataset packed by `wdstool pack`, a folder of .tar shards, or a shard)"
    )
    r = run_cli("index", str(tmp_path), check=False)
    assert r.returncode == 2 and r.stderr.strip().startswith("Error: say which index to write")


def test_missing_shard_is_named_and_no_index_is_written_for_it(packed: Path) -> None:
    shard = packed / shardlist(packed)[1]["url"]
    shard.unlink()
    r = run_cli("index", str(packed), "--dali", check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert f"{shard}: shard listed in the manifest is missing" in r.stderr
    assert not shard.with_suffix(".idx").exists()
    assert not [n for n in visible(packed) if ".tmp-" in n]


@pytest.mark.parametrize("cut", ["mid-data", "mid-header", "member-boundary"])
def test_truncated_shard_is_caught(packed: Path, cut: str) -> None:
    shard = packed / shardlist(packed)[2]["url"]
    data = shard.read_bytes()
    at = {"mid-data": 3000, "mid-header": 512 * 7 + 100, "member-boundary": len(data) - 1024 - 512}
    shard.write_bytes(data[: at[cut]])
    with pytest.raises(ShardError, match=rf"^{shard}: .*(truncated|bytes, the manifest says)"):
        write_dali_indexes(str(packed))
    assert not shard.with_suffix(".idx").exists()


def test_shard_disagreeing_with_the_manifest(packed: Path) -> None:
    raw = json.loads((packed / "index.json").read_text())
    raw["shardlist"][0]["nsamples"] += 1
    (packed / "index.json").write_text(json.dumps(raw))
    with pytest.raises(ShardError, match=r"train-000000\.tar: 6 samples, the manifest says 7"):
        write_dali_indexes(str(packed))
    raw["shardlist"][0]["nsamples"] -= 1
    raw["shardlist"][0]["filesize"] += 512
    (packed / "index.json").write_text(json.dumps(raw))
    with pytest.raises(ShardError, match=r"train-000000\.tar: \d+ bytes, the manifest says"):
        write_dali_indexes(str(packed))


def test_unwritable_out_is_a_one_line_error(packed: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    r = run_cli("index", str(packed), "--dali", "--out", str(blocker / "sub"), check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"Error: {blocker}/sub/train-000000.idx: cannot write")


def test_index_locations() -> None:
    assert index_location("s3://b/ds", "train-000001.tar", None) == (
        "s3://b/ds",
        "train-000001.idx",
    )
    assert index_location("s3://b/ds", "sub/a.tar", "/idx") == ("/idx", "sub/a.idx")
    assert index_location("/ds", "s3://other/x/a.tar", None) == ("s3://other/x", "a.idx")
    assert index_location("/ds", "/abs/a.tar", "/idx") == ("/idx", "a.idx")


def test_two_shards_one_index_file_is_refused(packed: Path) -> None:
    raw = json.loads((packed / "index.json").read_text())
    raw["shardlist"][1]["url"] = str(packed / "x" / raw["shardlist"][0]["url"])
    (packed / "index.json").write_text(json.dumps(raw))
    with pytest.raises(ShardError, match=r"would share the index file"):
        write_dali_indexes(str(packed), out=str(packed / "idx"))


def test_shuffled_pack_indexes_keys_in_shard_order(small_tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "ds"
    pack(
        str(small_tree), str(dest), PackOptions(workers=1, max_count=100, seed=random.randrange(9))
    )
    write_dali_indexes(str(dest))
    text = (dest / "train-000000.idx").read_text()
    tar = (dest / "train-000000.tar").read_bytes()
    assert len(check_index_against_tar(text, tar)) == 16
