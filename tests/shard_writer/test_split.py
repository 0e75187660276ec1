"""`wdstool split`: one data set per split, disjoint and complete, byte for byte; a sample's split
depends on its key and the seed only, so resharding or appending never moves it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shard_writer.options import ReshardOptions
from shard_writer.split import assign, parse_fractions, split
from tests.conftest import make_tree, run_cli
from tests.support.tar_reference import dataset_samples
from wdstool.base.errors import ConfigError


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("split")
    tree = make_tree(root / "tree", {"a": 20, "b": 20}, seed=11)
    run_cli("pack", str(tree), str(root / "ds"), "--max-count", "9", "--workers", "1", "-q")
    return root / "ds"


def _keys(folder: Path) -> set[str]:
    return {k for k, _ in dataset_samples(folder)}


def test_splits_are_disjoint_complete_and_byte_exact(packed: Path, tmp_path: Path) -> None:
    r = run_cli(
        "split", str(packed), str(tmp_path), "--fractions", "train=0.7,val=0.3", "--json", "-q"
    )
    out = json.loads(r.stdout)["splits"]
    train, val = dataset_samples(tmp_path / "train"), dataset_samples(tmp_path / "val")
    assert out["train"]["samples"] == len(train) and out["val"]["samples"] == len(val)
    assert sorted(train + val) == sorted(dataset_samples(packed))  # every sample once, as is
    assert 0 < len(val) < len(train)
    for k, _ in val:
        assert assign(k, 0, parse_fractions("train=0.7,val=0.3")) == 1
    m = json.loads((tmp_path / "val" / "index.json").read_text())
    assert m["pack_options"]["split"] == "val" and m["classes"] == ["a", "b"]


def test_a_sample_keeps_its_split_after_reshard_and_append(packed: Path, tmp_path: Path) -> None:
    fractions = parse_fractions("train=0.5,val=0.5")
    opts = ReshardOptions(workers=1, sync=False, seed=5)
    split(str(packed), str(tmp_path / "a"), fractions, opts)
    run_cli(
        "reshard", str(packed), str(tmp_path / "re"), "--max-count", "4", "--workers", "1", "-q"
    )
    more = make_tree(tmp_path / "more", {"a": 3, "b": 3}, seed=12)
    run_cli("pack", str(more), str(tmp_path / "re"), "--append", "--workers", "1", "-q")
    split(str(tmp_path / "re"), str(tmp_path / "b"), fractions, opts)
    old = _keys(packed)
    for name in ("train", "val"):
        assert _keys(tmp_path / "b" / name) & old == _keys(tmp_path / "a" / name)
    assert len(_keys(tmp_path / "b" / "train") | _keys(tmp_path / "b" / "val")) == len(old) + 6


@pytest.mark.parametrize(
    ("fractions", "message"),
    [
        ("train=0.9,val=0.2", "sum to 1.1, not 1"),
        ("train=1.0,train=0", "must be a number > 0"),
        ("train=0.5,train=0.5", "named twice"),
        ("../x=1", "use letters, digits"),
        ("train", "expected NAME=FRACTION"),
    ],
)
def test_bad_fractions_are_refused_before_any_work(fractions: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_fractions(fractions)


def test_bad_fractions_exit_with_one_line_and_write_nothing(packed: Path, tmp_path: Path) -> None:
    r = run_cli(
        "split", str(packed), str(tmp_path / "s"), "--fractions", "a=0.5,b=0.6", check=False
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "sum to 1.1" in r.stderr
    assert not (tmp_path / "s").exists()
    r = run_cli(
        "split",
        str(packed),
        str(tmp_path / "s"),
        "--fractions",
        "a=0.999999,b=0.000001",
        check=False,
    )
    assert r.returncode == 1 and "split 'b' would be empty" in r.stderr
    assert not list((tmp_path / "s").rglob("index.json"))
