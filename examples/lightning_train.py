"""Train with PyTorch Lightning on packed shards: ``make_loader`` inside a LightningDataModule.

    python examples/lightning_train.py --data build/demo/shards --val build/demo/shards \
        --accelerator cpu --devices 2 --image-size 64
    python examples/lightning_train.py --data s3://bucket/train --devices 8 \
        --ckpt-dir ckpt --save-every 500            # preempted? the same command with --resume

Nothing around the loader is Lightning-specific code: ``train_dataloader()`` returns what
``make_loader`` returns, built there, so it sees the rank and world size of Lightning's process
group. Lightning then
- calls ``loader.sampler.set_epoch(epoch)`` before every epoch (its ``_set_sampler_epoch``):
  every epoch reshuffles, the same (seed, epoch) giving the same order;
- reads ``len(loader)`` for the progress bar, ``num_training_batches`` and
  ``estimated_stepping_batches`` (equal on every rank);
- saves ``loader.state_dict()`` in every checkpoint (the loader is stateful) and calls
  ``load_state_dict`` when ``fit(..., ckpt_path=...)`` restores one, so a mid-epoch checkpoint
  continues with exactly the batches an uninterrupted run would have delivered next.

The validation loader uses ``uneven="mask"``: every rank runs the same number of batches and
every sample is counted exactly once over all ranks (padding slots carry ``valid=False``).
Install Lightning with ``pip install -e '.[lightning]'``.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

from loaders import make_loader, normalize

# Lightning warns about every IterableDataset with a length; ours is planned per rank and
# worker, so len(loader) is exact
warnings.filterwarnings("ignore", message=r"Your `IterableDataset` has `__len__` defined")


class ShardData(L.LightningDataModule):
    def __init__(
        self,
        data: str,
        val: str | None,
        *,
        batch_size: int,
        image_size: int,
        workers: int | None,
        seed: int,
    ) -> None:
        super().__init__()
        self.data, self.val = data, val
        self.kw = dict(image_size=image_size, num_workers=workers, seed=seed)
        self.batch_size = batch_size

    def train_dataloader(self):
        # built here, after Lightning started the process group: the loader reads this rank
        return make_loader(self.data, self.batch_size, drop_last=True, **self.kw)

    def val_dataloader(self):
        if self.val is None:
            return []
        return make_loader(
            self.val, self.batch_size, train=False, shuffle=False, uneven="mask", **self.kw
        )


class Classifier(L.LightningModule):
    """A small CNN; exact top-1 over all ranks (``valid`` masks the padding slots)."""

    def __init__(self, num_classes: int, lr: float = 0.05) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, num_classes),
        )
        self.register_buffer("counts", torch.zeros(2, dtype=torch.int64), persistent=False)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net(normalize(pixels))  # uint8 -> float on the device

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self(batch["pixel_values"]), batch["labels"])
        self.log("loss", loss, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self.counts.zero_()

    def validation_step(self, batch, batch_idx):
        valid = batch["valid"]
        pred = self(batch["pixel_values"]).argmax(1)
        self.counts += torch.stack([((pred == batch["labels"]) & valid).sum(), valid.sum()])

    def on_validation_epoch_end(self) -> None:
        correct, total = self.trainer.strategy.reduce(self.counts.clone(), reduce_op="sum")
        self.log("val_top1", correct.float() / total.clamp(min=1), prog_bar=True, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", required=True, help="index.json, a folder/prefix holding one, ...")
    p.add_argument("--val", default=None, help="validation shards (exact top-1 every epoch)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers per rank")
    p.add_argument("--classes", type=int, default=None, help="default: from the manifest")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--accelerator", default="auto")
    p.add_argument("--devices", default="auto")
    p.add_argument("--ckpt-dir", type=Path, default=None, help="checkpoints (and last.ckpt)")
    p.add_argument("--save-every", type=int, default=100, help="training steps per checkpoint")
    p.add_argument("--resume", action="store_true", help="continue from CKPT_DIR/last.ckpt")
    return p.parse_args(argv)


def build(args: argparse.Namespace, callbacks: list | None = None):
    """The data module, the model and the trainer the arguments describe."""
    L.seed_everything(args.seed, workers=False)
    data = ShardData(
        args.data,
        args.val,
        batch_size=args.batch_size,
        image_size=args.image_size,
        workers=args.workers,
        seed=args.seed,
    )
    classes = args.classes
    if classes is None:  # the manifest's class names (rank 0 of one process: nothing is read)
        probe = make_loader(args.data, 1, num_workers=0, rank=0, world_size=1)
        classes = len(probe.dataset.index.classes)
    model = Classifier(max(classes, 2), lr=args.lr)
    callbacks = list(callbacks or [])
    if args.ckpt_dir is not None:
        callbacks.append(
            ModelCheckpoint(
                dirpath=args.ckpt_dir, every_n_train_steps=args.save_every, save_last=True
            )
        )
    devices = int(args.devices) if str(args.devices).isdigit() else args.devices
    trainer = L.Trainer(
        accelerator=args.accelerator,
        devices=devices,
        strategy="ddp" if isinstance(devices, int) and devices > 1 else "auto",
        max_epochs=args.epochs,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=args.ckpt_dir is not None,
        log_every_n_steps=1,
    )
    return data, model, trainer


def main(argv: list[str] | None = None, callbacks: list | None = None) -> None:
    args = parse_args(argv)
    data, model, trainer = build(args, callbacks)
    last = args.ckpt_dir / "last.ckpt" if args.ckpt_dir is not None else None
    ckpt = last if args.resume and last is not None and last.exists() else None
    trainer.fit(model, datamodule=data, ckpt_path=ckpt)


if __name__ == "__main__":
    main()
