"""A torchtnt training run over make_loader, as the README shows it, for the tests: run with
torchrun on the CPU (gloo). Every rank logs each batch's keys to LOG/rank<R>.jsonl.

    torchrun --nproc_per_node=2 tests/loaders/training/torchtnt_job.py --data DATA --keys-log LOG

``train(unit, loader)`` runs with torchtnt's ``DistributedCheckpointSaver`` checkpointing every
2 training steps into LOG/ckpt (intra-epoch: the loader is Stateful, so torchtnt saves its state
with the unit's) and goes on to the end. Then it starts over as a restarted job does (a new unit
and loader), ``DistributedCheckpointSaver.restore(LOG/ckpt/epoch_0_train_step_2, unit,
train_dataloader=loader)`` from disk, and trains on, logging to LOG/rank<R>.resumed.jsonl.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torchtnt.framework import train
from torchtnt.framework.callbacks.dcp_saver import DistributedCheckpointSaver
from torchtnt.framework.state import State
from torchtnt.framework.unit import TrainUnit

from loaders import make_loader
from tests.loaders.training.jobs import job_args


class Unit(TrainUnit[dict]):
    def __init__(self, loader: Any, log: Any) -> None:
        super().__init__()
        self.loader = loader
        self.log = log
        self.model = torch.nn.Linear(3, 3)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def on_train_epoch_start(self, state: State) -> None:
        # torchtnt calls set_epoch only on a torch DataLoader's sampler: reshuffle here
        self.loader.set_epoch(self.train_progress.num_epochs_completed)

    def train_step(self, state: State, data: dict) -> None:
        x = data["pixel_values"].float().mean(dim=(2, 3)) / 255
        loss = torch.nn.functional.cross_entropy(self.model(x), data["labels"])
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        entry = {
            "epoch": self.train_progress.num_epochs_completed,
            "step": self.train_progress.num_steps_completed_in_epoch,
            "keys": data["keys"],
        }
        self.log.write(json.dumps(entry) + "\n")


def run(args: argparse.Namespace, log: Path, restore: Path | None) -> None:
    loader = make_loader(args.data, args.batch_size, image_size=16, num_workers=1, seed=0)
    with open(log, "w") as f:
        unit = Unit(loader, f)
        callbacks = []
        if restore is not None:
            DistributedCheckpointSaver.restore(str(restore), unit, train_dataloader=loader)
        else:
            ckpt = DistributedCheckpointSaver(str(args.log / "ckpt"), save_every_n_train_steps=2)
            callbacks.append(ckpt)
        train(unit, loader, max_epochs=args.epochs, callbacks=callbacks)


def main() -> None:
    args = job_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    run(args, args.log / f"rank{rank}.jsonl", None)
    step2 = args.log / "ckpt" / "epoch_0_train_step_2"  # torchtnt's name for it
    run(args, args.log / f"rank{rank}.resumed.jsonl", step2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
