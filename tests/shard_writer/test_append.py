"""`pack --append` and `reshard --append`: a new version after the last shard, old shards
untouched, index.json with every shard and the history; bad DESTs are one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import dir_bytes, make_tree, run_cli
from tests.support.tar_reference import dataset_samples


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(a data set of 2 classes, a tree with one old and one new class, a listing with ints)."""
    root = tmp_path_factory.mktemp("append")
    first = make_tree(root / "t1", {"bird": 6, "cat": 5}, seed=41)
    ds = root / "ds"
    run_cli("pack", str(first), str(ds), "--max-count", "4", "--workers", "1", "-q")
    more = make_tree(root / "t2", {"ant": 3, "cat": 4}, seed=42)
    listing = root / "ints.csv"
    listing.write_text("path,label\nt1/cat/img_0000.jpg,1\n")
    return ds, more, listing


def _copy(ds: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(ds, to)
    return to


def _manifest(ds: Path) -> dict:
    return json.loads((ds / "index.json").read_text())


def test_pack_append_adds_a_version_after_the_last_shard(trees, tmp_path: Path) -> None:
    ds, more, _ = trees
    dest = _copy(ds, tmp_path / "ds")
    before = dir_bytes(dest)
    r = run_cli("pack", str(more), str(dest), "--append", "--max-count", "4", "--json")
    summary = json.loads(r.stdout)
    assert summary["samples"] == 7 and summary["version"] == 2
    assert summary["dataset_samples"] == 18 and summary["dataset_shards"] == 5
    after = dir_bytes(dest)
    rewritten = ("index.json", "index.offsets.npy")  # the data set's indexes: every shard's
    assert all(after[n] == b for n, b in before.items() if n not in rewritten)  # untouched
    m = _manifest(dest)
    assert [e["url"] for e in m["shardlist"]] == [f"train-{i:06d}.tar" for i in range(5)]
    assert m["num_samples"] == 18 and m["classes"] == ["bird", "cat", "ant"]
    v1, v2 = m["versions"]
    assert (v1["version"], v1["shards"], v1["samples"], v1["identity"]) == (
        1,
        3,
        11,
        _manifest(ds)["fingerprint"],
    )
    assert (v2["version"], v2["shards"], v2["samples"], v2["added_samples"]) == (2, 5, 18, 7)
    assert v2["inputs"] == [str(more)] and v2["created"].endswith("Z")
    assert v2["identity"] == m["fingerprint"] != v1["identity"]
    samples = dataset_samples(dest)
    assert len({k for k, _ in samples}) == 18  # keys numbered on: unique across versions
    for _key, members in samples[11:]:  # old class names keep their index, new ones follow
        meta = json.loads(dict(members)[".json"])
        assert int(dict(members)[".cls"]) == m["classes"].index(meta["class"])
    assert json.loads(run_cli("verify", str(dest), "--json").stdout)["ok"]
    info = run_cli("inspect", str(dest)).stdout
    assert "version 2:" in info and f"input {more}" in info


@pytest.mark.parametrize("kind", ["empty", "files", "foreign manifest", "not json"])
def test_append_to_something_that_is_not_a_data_set(trees, tmp_path: Path, kind: str) -> None:
    _, more, _ = trees
    dest = tmp_path / "d"
    dest.mkdir()
    if kind == "files":
        (dest / "x.tar").write_bytes(b"")
    elif kind == "foreign manifest":
        (dest / "index.json").write_text(json.dumps({"shardlist": []}))
    elif kind == "not json":
        (dest / "index.json").write_text("{")
    before = dir_bytes(dest)
    r = run_cli("pack", str(more), str(dest), "--append", check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "not a wdstool data set" in r.stderr and "drop --append" in r.stderr
    assert dir_bytes(dest) == before and not (dest / ".wdstool-pack").exists()


def test_append_and_overwrite_exclude_each_other(trees, tmp_path: Path) -> None:
    ds, more, _ = trees
    r = run_cli("pack", str(more), str(ds), "--append", "--overwrite", check=False)
    assert r.returncode == 2 and "choose one" in r.stderr


def test_labels_must_be_given_the_way_dest_gives_them(trees, tmp_path: Path) -> None:
    ds, _, listing = trees
    dest = _copy(ds, tmp_path / "ds")
    r = run_cli("pack", str(listing), str(dest), "--append", check=False)
    assert r.returncode == 1 and "DEST labels samples by class name, SRC does not" in r.stderr
    assert dir_bytes(dest) == dir_bytes(ds)


def test_reshard_append_checks_keys_against_dest(trees, tmp_path: Path) -> None:
    ds, _, _ = trees
    dest = _copy(ds, tmp_path / "ds")
    r = run_cli("reshard", str(ds), str(dest), "--append", check=False)
    assert r.returncode == 1 and "is in both" in r.stderr
    assert str(dest / "train-000000.tar") in r.stderr and str(ds / "train-000000.tar") in r.stderr
    assert dir_bytes(dest) == dir_bytes(ds)
    deduped = run_cli("reshard", str(ds), str(dest), "--append", "--dedupe", check=False)
    assert deduped.returncode == 1 and "no samples to write (11 skipped)" in deduped.stderr
    out = json.loads(
        run_cli("reshard", str(ds), str(dest), "--append", "--rename-collisions", "--json").stdout
    )
    assert out["renamed"] == 11 and out["dataset_samples"] == 22
    keys = [k for k, _ in dataset_samples(dest)]
    assert sorted(keys[11:]) == sorted(k + "_1" for k in keys[:11])
    assert _manifest(dest)["versions"][1]["command"] == "reshard"
