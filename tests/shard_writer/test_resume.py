"""kill -9 at random moments, then rerun: byte-identical to an uninterrupted pack."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, dir_bytes, make_tree, run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tree_and_reference(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("resume")
    src = make_tree(root / "src", {f"c{i}": 120 for i in range(5)}, seed=3)
    ref = root / "ref"
    run_cli("pack", str(src), str(ref), "--max-count", "6", "--workers", "2", "-q")
    return src, ref


def _start(src: Path, dest: Path, workers: int) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wdstool",
            "pack",
            str(src),
            str(dest),
            "--max-count",
            "6",
            "--workers",
            str(workers),
            "-q",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def kill_mid_pack(proc: subprocess.Popen, dest: Path, rng: random.Random, max_shards: int) -> None:
    """Freeze the pack's whole process group the moment a random number (< max_shards) of
    shards is published, plus a random fraction of one shard's time, then SIGKILL it: the kill
    lands between shards, inside a shard write, or around a marker/rename. A pack of tiny
    images takes ~2 ms a shard, so the watch is a busy loop and SIGSTOP comes before SIGKILL."""
    target, extra = rng.randrange(0, max_shards), rng.uniform(0, 0.002)
    deadline = time.monotonic() + 60
    while _published(dest) < target and proc.poll() is None:
        assert time.monotonic() < deadline
    until = time.monotonic() + extra
    while time.monotonic() < until:
        pass
    os.killpg(proc.pid, signal.SIGSTOP)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole group: pool workers die too, like a crash
    proc.wait()


def _published(dest: Path) -> int:
    try:
        return sum(1 for e in os.scandir(dest) if e.name.endswith(".tar"))
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("run", range(5))
def test_kill_9_then_rerun_is_byte_identical(run: int, tree_and_reference, tmp_path: Path) -> None:
    src, ref = tree_and_reference
    ref_manifest = json.loads((ref / "index.json").read_text())
    final_hashes = {e["url"]: e["sha256"] for e in ref_manifest["shardlist"]}
    dest = tmp_path / "out"
    rng = random.Random(run)
    workers = 1 + run % 2
    proc = _start(src, dest, workers)
    # kill after a random number of shards (of 100) is published: the kill lands mid-pack
    kill_mid_pack(proc, dest, rng, max_shards=60)
    assert not (dest / "index.json").exists(), "the pack finished before the kill"
    # whatever is under a final name must be a complete, correct shard
    for p in dest.glob("*.tar"):
        assert hashlib.sha256(p.read_bytes()).hexdigest() == final_hashes[p.name], p.name
    args = ["--resume"] if run % 2 else []
    r = run_cli("pack", str(src), str(dest), "--max-count", "6", "--workers", "2", "--json", *args)
    assert json.loads(r.stdout)["samples"] == 600
    assert dir_bytes(dest) == dir_bytes(ref)
    assert not any(".tmp-" in p.name for p in dest.iterdir())
