"""kill -9 in the middle of a reshard or of an append, then the same command again: the result
is what an uninterrupted run writes, and nothing incomplete was ever visible."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, dir_bytes, make_tree, run_cli
from tests.shard_writer.test_resume import kill_mid_pack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(a data set of 240 samples, its reshard into 80 shards of 3, a tree of 60 more images)."""
    root = tmp_path_factory.mktemp("reshard-resume")
    tree = make_tree(root / "tree", {f"c{i}": 60 for i in range(4)}, seed=31)
    ds = root / "ds"
    run_cli("pack", str(tree), str(ds), "--max-count", "50", "--workers", "1", "-q")
    ref = root / "ref"
    run_cli("reshard", str(ds), str(ref), "--max-count", "3", "--workers", "2", "-q")
    more = make_tree(root / "more", {"c0": 30, "c9": 30}, seed=32)
    return ds, ref, more


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "wdstool", *args, "--workers", "2", "-q"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def test_reshard_killed_then_rerun_is_byte_identical(source, tmp_path: Path) -> None:
    ds, ref, _ = source
    dest = tmp_path / "out"
    final = {
        e["url"]: e["sha256"] for e in json.loads((ref / "index.json").read_text())["shardlist"]
    }
    proc = _start("reshard", str(ds), str(dest), "--max-count", "3")
    kill_mid_pack(proc, dest, random.Random(1), max_shards=50)
    assert not (dest / "index.json").exists(), "the reshard finished before the kill"
    for p in dest.glob("*.tar"):  # what is under a final name is a complete, correct shard
        assert hashlib.sha256(p.read_bytes()).hexdigest() == final[p.name], p.name
    out = run_cli("reshard", str(ds), str(dest), "--max-count", "3", "--workers", "1", "--json")
    assert json.loads(out.stdout)["reused_shards"] > 0
    assert dir_bytes(dest) == dir_bytes(ref)
    assert not any(".tmp-" in p.name for p in dest.iterdir())


def _without_times(manifest: dict) -> dict:
    for v in manifest.get("versions", []):
        v.pop("created")
    return manifest


def test_append_killed_then_rerun_equals_an_uninterrupted_append(source, tmp_path: Path) -> None:
    ds, _, more = source
    ref, dest = tmp_path / "ref", tmp_path / "out"
    for d in (ref, dest):
        run_cli("reshard", str(ds), str(d), "--max-count", "40", "--workers", "1", "-q")
    old = dir_bytes(dest)
    run_cli("pack", str(more), str(ref), "--append", "--max-count", "2", "--workers", "1", "-q")
    proc = _start("pack", str(more), str(dest), "--append", "--max-count", "2")
    kill_mid_pack(proc, dest, random.Random(7), max_shards=6 + 20)
    assert json.loads((dest / "index.json").read_bytes()) == json.loads(old["index.json"])
    run_cli("pack", str(more), str(dest), "--append", "--max-count", "2", "--workers", "1", "-q")
    got, want = dir_bytes(dest), dir_bytes(ref)
    assert {k: v for k, v in got.items() if k != "index.json"} == {
        k: v for k, v in want.items() if k != "index.json"
    }
    assert _without_times(json.loads(got["index.json"])) == _without_times(
        json.loads(want["index.json"])
    )
    assert all(
        got[name] == data
        for name, data in old.items()
        if name not in ("index.json", "index.offsets.npy")  # the indexes of every shard
    )
    again = run_cli("pack", str(more), str(dest), "--append", "--max-count", "2", "--json")
    assert json.loads(again.stdout)["up_to_date"] is True
