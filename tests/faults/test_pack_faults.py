"""Pack under faults: kill -9 at random moments, a full disk, an unwritable destination, source
files changing or vanishing mid-pack. Nothing half-written under a final name, ever."""

from __future__ import annotations

import hashlib
import json
import random
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shard_writer.pack import PackOptions, pack
from tests.conftest import REPO, dir_bytes, make_tree, run_cli
from tests.faults.conftest import runs
from tests.shard_writer.test_resume import kill_mid_pack
from wdstool.base.errors import InputError

pytestmark = pytest.mark.slow
ARGS = ("--max-count", "6", "--workers", "2")


@pytest.fixture(scope="module")
def tree_and_ref(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("packfaults")
    src = make_tree(root / "src", {f"c{i}": 120 for i in range(5)}, seed=31)
    ref = root / "ref"
    run_cli("pack", str(src), str(ref), *ARGS, "-q")
    return src, ref


def _complete_shards_only(dest: Path, ref: Path) -> None:
    """Whatever sits under a final name is a complete, correct shard; no manifest yet."""
    hashes = {
        e["url"]: e["sha256"] for e in json.loads((ref / "index.json").read_text())["shardlist"]
    }
    assert not (dest / "index.json").exists()
    for p in dest.glob("*.tar"):
        assert hashlib.sha256(p.read_bytes()).hexdigest() == hashes[p.name], p.name


@pytest.mark.full
def test_kill_9_at_random_moments_then_resume(tree_and_ref, tmp_path: Path, record) -> None:
    src, ref = tree_and_ref
    rec = record("pack: kill -9 at a random moment, then rerun")
    rng = random.Random(2024)
    for run in range(runs(10)):  # 50 under make faults
        dest = tmp_path / f"out{run}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "wdstool", "pack", str(src), str(dest), *ARGS, "-q"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        kill_mid_pack(proc, dest, rng, max_shards=90)
        _complete_shards_only(dest, ref)
        r = run_cli("pack", str(src), str(dest), *ARGS, "--json")
        assert json.loads(r.stdout)["samples"] == 600
        assert dir_bytes(dest) == dir_bytes(ref), f"run {run}"
        rec.recovered()


def _limit_file_size(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_destination_full(tree_and_ref, tmp_path: Path, record) -> None:
    """A file-size limit on the pack process stands in for a full disk: writes fail midway."""
    src, ref = tree_and_ref
    dest = tmp_path / "full"
    proc = subprocess.run(
        [sys.executable, "-m", "wdstool", "pack", str(src), str(dest), *ARGS, "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size(20_000),  # shards here are ~25 KB
    )
    assert proc.returncode != 0
    record("pack: destination full").clear_error(proc.stderr, str(dest))
    assert "File too large" in proc.stderr or "No space" in proc.stderr
    _complete_shards_only(dest, ref)
    run_cli("pack", str(src), str(dest), *ARGS, "-q")  # space again: the rerun completes
    assert dir_bytes(dest) == dir_bytes(ref)
    record("pack: destination full").recovered()


def test_destination_not_writable(tree_and_ref, tmp_path: Path, record) -> None:
    src, _ = tree_and_ref
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    r = run_cli("pack", str(src), str(blocker / "shards"), check=False)
    assert r.returncode != 0
    record("pack: destination not writable").clear_error(r.stderr, str(blocker))


@pytest.mark.parametrize("change", ["vanish", "shrink", "grow"])
def test_source_changing_during_pack(tmp_path: Path, change: str, record) -> None:
    src = make_tree(tmp_path / "src", {"a": 20, "b": 20}, seed=41)
    victim = src / "b" / "img_0005.jpg"
    original = victim.read_bytes()

    def on_total(items: int, shards: int, phase: str) -> None:
        if phase == "pack":  # probed and planned; now the file changes under us
            if change == "vanish":
                victim.unlink()
            elif change == "shrink":
                victim.write_bytes(original[:-100])
            else:
                victim.write_bytes(original + b"\0" * 100)

    dest = tmp_path / "out"
    with pytest.raises(InputError) as info:
        pack(str(src), str(dest), PackOptions(workers=1, max_count=7), on_total=on_total)
    msg = info.value.message
    assert "during pack" in msg
    record("pack: source file vanishing/changing mid-pack").clear_error(msg, str(victim))
    assert not (dest / "index.json").exists()
    assert not [p for p in dest.iterdir() if ".tmp-" in p.name]
    victim.write_bytes(original)
    ref = tmp_path / "ref"
    pack(str(src), str(ref), PackOptions(workers=1, max_count=7))
    pack(str(src), str(dest), PackOptions(workers=1, max_count=7))  # rerun after the fix
    assert dir_bytes(dest) == dir_bytes(ref)
