"""One run of examples/lightning_train.py for the tests, plus two callbacks: one appends what
every rank saw (each training and validation batch's keys, Lightning's batch counts, the loader's
rank) to LOG/rank<R>.jsonl; the other ends every rank at once, like a preemption, right after the
checkpoint of training step ``--exit-after`` was written.

    python tests/loaders/training/lightning_job.py --keys-log LOG [--exit-after K] -- <lightning_train.py args>
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

import lightning as L

REPO = Path(__file__).resolve().parents[3]


def _example():
    spec = importlib.util.spec_from_file_location(
        "lightning_train", REPO / "examples" / "lightning_train.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class KeysLog(L.Callback):
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.file = None

    def _write(self, trainer, entry: dict) -> None:
        if self.file is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.file = (self.folder / f"rank{trainer.global_rank}.jsonl").open("a")
        self.file.write(json.dumps(entry) + "\n")
        self.file.flush()

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        loader = trainer.train_dataloader
        self._write(
            trainer,
            {
                "kind": "epoch",
                "epoch": trainer.current_epoch,
                "num_training_batches": trainer.num_training_batches,
                "estimated_stepping_batches": trainer.estimated_stepping_batches,
                "len": len(loader),
                "loader_rank": loader.topology.rank,
                "loader_world": loader.topology.world_size,
                "loader_epoch": loader.epoch,
            },
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._write(
            trainer,
            {
                "kind": "train",
                "epoch": trainer.current_epoch,
                "step": batch_idx,
                "keys": list(batch["keys"]),
            },
        )

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *a) -> None:
        self._write(
            trainer,
            {
                "kind": "val",
                "sanity": trainer.sanity_checking,
                "epoch": trainer.current_epoch,
                "step": batch_idx,
                "keys": list(batch["keys"]),
                "valid": batch["valid"].tolist(),
            },
        )


class ExitAfter(L.Callback):
    """Every rank leaves the process as the next training batch starts (the checkpoint of step
    ``step`` is complete by then: Lightning saves it with a barrier)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            sys.stdout.flush()
            os._exit(0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--keys-log", type=Path, required=True)
    p.add_argument("--exit-after", type=int, default=None)
    args, rest = p.parse_known_args()
    rest = [a for a in rest if a != "--"]
    callbacks: list = [KeysLog(args.keys_log)]
    if args.exit_after is not None:
        callbacks.append(ExitAfter(args.exit_after))
    _example().main(rest, callbacks)


if __name__ == "__main__":
    main()
