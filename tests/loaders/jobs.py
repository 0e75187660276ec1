"""Running a training job script (tests/loaders/*_job.py) on 2 CPU ranks with torchrun (gloo on
127.0.0.1) and reading back the keys every rank logged (LOG/rank<R>.jsonl)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.loaders.test_torchrun import free_port, torchrun_env


def run_job(job: str, log: Path, data: Path, *extra: str) -> None:
    """``torchrun --nproc_per_node=2 tests/loaders/JOB --data DATA --keys-log LOG EXTRA``.
    Each job trains, checkpoints mid-epoch and goes on; then restores that checkpoint from disk
    into a new loader (and model) and trains on, logging the two runs apart."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(REPO / "tests" / "loaders" / job),
        "--data",
        str(data),
        "--keys-log",
        str(log),
        *extra,
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=280, cwd=REPO, env=torchrun_env()
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def read_log(folder: Path, rank: int, run: str = "") -> list[dict]:
    """Rank ``rank``'s log of the first run (``run=""``) or of the resumed one ("resumed")."""
    name = f"rank{rank}.{run}.jsonl" if run else f"rank{rank}.jsonl"
    return [json.loads(line) for line in (folder / name).read_text().splitlines()]


def batches(folder: Path, rank: int, run: str = "") -> list[tuple[int, int, list[str]]]:
    """(epoch, step in the epoch, keys) of every batch rank ``rank`` trained on."""
    return [(e["epoch"], e["step"], e["keys"]) for e in read_log(folder, rank, run) if "keys" in e]
