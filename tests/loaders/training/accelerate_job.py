"""A training loop under Hugging Face Accelerate, as the README shows it, for the tests: run with
torchrun on the CPU (gloo). Every rank logs what it saw (what ``prepare`` returned, each batch's
keys) to LOG/rank<R>.jsonl.

    torchrun --nproc_per_node=2 tests/loaders/training/accelerate_job.py --data DATA --keys-log LOG

The loader is registered with ``register_for_checkpointing``; the run calls
``accelerator.save_state(LOG/ckpt)`` right after batch 1 of epoch 0 and goes on to the end, as a
run that is preempted later would. Then it starts over as a restarted job does (a new
Accelerator, model, optimizer and loader) and ``load_state``s that checkpoint from disk, logging
the batches of the resumed run to LOG/rank<R>.resumed.jsonl.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from accelerate import Accelerator

from loaders import make_loader
from tests.loaders.training.jobs import job_args

SAVE_AT = (0, 1)  # (epoch, step)


def run(args: argparse.Namespace, log: Path, resume: bool) -> None:
    accelerator = Accelerator(cpu=True)
    loader = make_loader(args.data, args.batch_size, image_size=16, num_workers=1, seed=0)
    model = torch.nn.Linear(3, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    accelerator.register_for_checkpointing(loader)
    ckpt = args.log / "ckpt"
    if resume:
        accelerator.load_state(ckpt)
    with open(log, "w") as f:
        start = {
            "prepared_is_loader": prepared is loader,
            "batch_size": loader.batch_size,
            "world_size": accelerator.num_processes,
            "loader_rank": loader.topology.rank,
            "loader_world": loader.topology.world_size,
            "len": len(loader),
        }
        f.write(json.dumps(start) + "\n")
        for epoch in range(loader.epoch, args.epochs):
            loader.set_epoch(epoch)
            for step, batch in enumerate(prepared, start=loader.start_batch):
                x = batch["pixel_values"].float().mean(dim=(2, 3)) / 255
                loss = torch.nn.functional.cross_entropy(model(x), batch["labels"])
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                f.write(json.dumps({"epoch": epoch, "step": step, "keys": batch["keys"]}) + "\n")
                if not resume and (epoch, step) == SAVE_AT:
                    accelerator.save_state(ckpt)
    accelerator.wait_for_everyone()


def main() -> None:
    args = job_args()
    rank = Accelerator(cpu=True).process_index
    run(args, args.log / f"rank{rank}.jsonl", resume=False)
    run(args, args.log / f"rank{rank}.resumed.jsonl", resume=True)


if __name__ == "__main__":
    main()
