"""Training jobs of other libraries over make_loader (tests/loaders/training/*_job.py): run on 2 CPU ranks
with torchrun (gloo on 127.0.0.1), then checked against plain loops over make_loader.

Every job takes ``--data DATA --keys-log LOG`` (:func:`job_args`), trains 2 epochs of 4 batches
of 15 per rank (120 samples), checkpoints mid-epoch and goes on to the end, then restores that
checkpoint from disk into a new loader (and model) and trains on. Each rank logs the keys of
every batch, the first run to LOG/rank<R>.jsonl and the resumed one to LOG/rank<R>.resumed.jsonl.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.conftest import REPO
from tests.support.torchrun import free_port, torchrun_env

EPOCHS, BATCH, STEPS = 2, 15, 4  # per rank: 120 samples / 2 ranks / 15


def job_args() -> argparse.Namespace:
    """A job's arguments (LOG is created)."""
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--keys-log", dest="log", type=Path, required=True)
    p.add_argument("--epochs", type=int, default=EPOCHS)
    p.add_argument("--batch-size", type=int, default=BATCH)
    args = p.parse_args()
    args.log.mkdir(parents=True, exist_ok=True)
    return args


def run_job(job: str, log: Path, data: Path) -> None:
    """``torchrun --nproc_per_node=2 tests/loaders/training/JOB --data DATA --keys-log LOG``."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(REPO / "tests" / "loaders" / "training" / job),
        "--data",
        str(data),
        "--keys-log",
        str(log),
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


def _plain(data: Path, rank: int, epoch: int) -> list[list[str]]:
    """What a plain loop over make_loader gives rank ``rank`` of 2 in ``epoch``."""
    from loaders import make_loader

    loader = make_loader(data, BATCH, image_size=16, num_workers=1, seed=0, rank=rank, world_size=2)
    loader.set_epoch(epoch)
    return [list(b["keys"]) for b in loader]


def check_runs(log: Path, data: Path, resumed_after: tuple[int, int]) -> None:
    """Each rank trained on its share of every epoch as a plain loop gets it (so the library
    neither sharded the data again nor kept it from reshuffling), the two ranks on every sample
    exactly once per epoch, and the resumed run on exactly the batches the first run trained on
    after (epoch, step) ``resumed_after``."""
    from tests.loaders.conftest import shard_keys

    everything = Counter(k for ks in shard_keys(data) for k in ks)
    for rank in range(2):
        got = batches(log, rank)
        assert [(e, s) for e, s, _ in got] == [(e, s) for e in range(EPOCHS) for s in range(STEPS)]
        for epoch in range(EPOCHS):
            assert [k for e, _, k in got if e == epoch] == _plain(data, rank, epoch)
        after = [b for b in got if (b[0], b[1]) > resumed_after]
        assert batches(log, rank, "resumed") == after
    for epoch in range(EPOCHS):
        seen = Counter(
            k for r in range(2) for e, _, ks in batches(log, r) if e == epoch for k in ks
        )
        assert seen == everything
