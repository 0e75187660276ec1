"""make_loader under PyTorch Lightning: real 2-process DDP on the CPU (gloo, 127.0.0.1), each run
a subprocess of examples/lightning_train.py (through tests/loaders/training/lightning_job.py, which logs
every batch's keys per rank).

Three runs: an uninterrupted one (2 epochs, validation with ``uneven="mask"``); one that
checkpoints every 2 steps and dies right after the checkpoint of step 2 of a 4-batch epoch; and
``fit(ckpt_path=last.ckpt)`` in a new process. Lightning itself saves and restores the loader
(it is ``_Stateful``), calls ``set_epoch`` (through ``loader.sampler``) and reads ``len()``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from loaders import make_loader
from tests.conftest import REPO
from tests.loaders.conftest import shard_keys
from tests.support.torchrun import free_port, torchrun_env

# the jobs import Lightning in their own processes: found, not imported here (importing it in
# every make-test worker at collection cost ~4 s of CPU each)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.full,
    pytest.mark.skipif(
        importlib.util.find_spec("lightning") is None,
        reason="Lightning is not installed (pip install -e '.[lightning]')",
    ),
]

JOB = REPO / "tests" / "loaders" / "training" / "lightning_job.py"
BATCH, SIZE, WORKERS, EPOCHS = 15, 16, 1, 2  # 120 samples / 2 ranks / 15 = 4 batches per epoch


def _args(data: Path, val: Path, *extra: str) -> list[str]:
    return [
        "--data",
        str(data),
        "--val",
        str(val),
        "--accelerator",
        "cpu",
        "--devices",
        "2",
        "--epochs",
        str(EPOCHS),
        "--batch-size",
        str(BATCH),
        "--image-size",
        str(SIZE),
        "--workers",
        str(WORKERS),
        *extra,
    ]


def _run(log: Path, args: list[str], exit_after: int | None = None, torchrun: bool = False) -> None:
    """``python lightning_job.py``: Lightning's own launcher starts rank 1 (what a new user
    runs); with ``torchrun`` both ranks start at once (Lightning reads torchrun's environment),
    which halves the start-up of a test (each process imports Lightning for ~10 s here)."""
    port = str(free_port())
    launch = [sys.executable]
    if torchrun:
        launch += ["-m", "torch.distributed.run", "--nproc_per_node=2"]
        launch += ["--master_addr=127.0.0.1", f"--master_port={port}"]
    cmd = [*launch, str(JOB), "--keys-log", str(log)]
    if exit_after is not None:
        cmd += ["--exit-after", str(exit_after)]
    env = {**torchrun_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    proc = subprocess.run(
        [*cmd, "--", *args], capture_output=True, text=True, timeout=280, cwd=REPO, env=env
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def _log(folder: Path, rank: int, kind: str) -> list[dict]:
    lines = (folder / f"rank{rank}.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def _train(folder: Path, rank: int) -> list[tuple[int, int, list[str]]]:
    return [(e["epoch"], e["step"], e["keys"]) for e in _log(folder, rank, "train")]


def _plain(data: Path, rank: int, epoch: int) -> list[list[str]]:
    """What a plain torchrun loop over make_loader gives rank ``rank`` in ``epoch``."""
    loader = make_loader(
        data, BATCH, image_size=SIZE, num_workers=WORKERS, seed=0, rank=rank, world_size=2
    )
    loader.set_epoch(epoch)
    return [list(b["keys"]) for b in loader]


def _check_validation(folder: Path, val: Path, epochs: set[int]) -> None:
    """Every validation pass (sanity checks aside): the same batch count on both ranks, every
    sample counted exactly once over the ranks (``valid``), padding the only extra."""
    everything = Counter(k for ks in shard_keys(val) for k in ks)
    passes = {r: [e for e in _log(folder, r, "val") if not e["sanity"]] for r in range(2)}
    assert {e["epoch"] for e in passes[0]} == epochs
    for epoch in epochs:
        got = {r: [e for e in passes[r] if e["epoch"] == epoch] for r in range(2)}
        assert len(got[0]) == len(got[1]) > 0
        assert [len(e["keys"]) for e in got[0]] == [len(e["keys"]) for e in got[1]]
        counted = Counter(
            k
            for r in range(2)
            for e in got[r]
            for k, ok in zip(e["keys"], e["valid"], strict=True)
            if ok
        )
        assert counted == everything  # 23 samples over 2 ranks: 1 padding slot, not counted
        assert sum(not ok for r in range(2) for e in got[r] for ok in e["valid"]) == 1


@pytest.fixture(scope="module")
def reference(learnable_dataset: Path, uneven_dataset: Path, tmp_path_factory) -> Path:
    """An uninterrupted 2-epoch Lightning run; its per-rank log."""
    log = tmp_path_factory.mktemp("lightning-ref")
    _run(log, _args(learnable_dataset, uneven_dataset), torchrun=True)
    return log


def test_lightning_ddp_delivers_each_ranks_share_reshuffled_every_epoch(
    reference: Path, learnable_dataset: Path, uneven_dataset: Path
) -> None:
    everything = Counter(k for ks in shard_keys(learnable_dataset) for k in ks)
    for epoch in range(EPOCHS):
        seen: Counter[str] = Counter()
        for rank in range(2):
            starts = [e for e in _log(reference, rank, "epoch") if e["epoch"] == epoch]
            assert len(starts) == 1
            # the loader read Lightning's rank and world size, and got set_epoch from Lightning
            assert starts[0]["loader_rank"] == rank and starts[0]["loader_world"] == 2
            assert starts[0]["loader_epoch"] == epoch
            assert starts[0]["len"] == starts[0]["num_training_batches"] == 4
            assert starts[0]["estimated_stepping_batches"] == 4 * EPOCHS
            batches = [keys for e, _, keys in _train(reference, rank) if e == epoch]
            assert [s for e, s, _ in _train(reference, rank) if e == epoch] == [0, 1, 2, 3]
            assert batches == _plain(learnable_dataset, rank, epoch)  # no sampler of Lightning's
            seen.update(k for b in batches for k in b)
        assert seen == everything  # the two ranks' shares: disjoint, covering the epoch
    orders = [[k for e, _, ks in _train(reference, 0) if e == ep for k in ks] for ep in (0, 1)]
    assert orders[0] != orders[1] and sorted(orders[0]) != sorted(orders[1])  # reshuffled
    _check_validation(reference, uneven_dataset, {0, 1})


def test_lightning_resumes_a_mid_epoch_checkpoint_exactly(
    reference: Path, learnable_dataset: Path, uneven_dataset: Path, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    first, second = tmp_path / "first", tmp_path / "second"
    args = _args(learnable_dataset, uneven_dataset, "--ckpt-dir", str(ckpt), "--save-every", "2")
    _run(first, args, exit_after=2)  # killed after the checkpoint of step 2 (of 4) in epoch 0
    assert (ckpt / "last.ckpt").exists()
    for rank in range(2):
        assert [(e, s) for e, s, _ in _train(first, rank)] == [(0, 0), (0, 1)]
    _run(second, [*args, "--resume"])
    for rank in range(2):
        stitched = _train(first, rank) + _train(second, rank)
        assert stitched == _train(reference, rank), f"rank {rank}"
        starts = _log(second, rank, "epoch")  # epoch 1 starts in the resumed run: full length
        assert [(e["epoch"], e["len"], e["num_training_batches"]) for e in starts] == [(1, 4, 4)]
    _check_validation(second, uneven_dataset, {0, 1})
