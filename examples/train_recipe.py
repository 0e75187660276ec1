"""A DeiT-style run: the whole training recipe inside the loader, the batch ops on the device.

    torchrun --nproc-per-node N examples/train_recipe.py SRC --epochs E \
        --max-steps-per-epoch S --batch-size B --workers W [--val VAL] [--device cpu]

- the recipe: RandomResizedCrop (bicubic) + flip fused into the decoder, RandAugment(2, 9) and
  RandomErasing(0.25) in the workers on the crop, every draw seeded per sample;
- repeated augmentation (``repeats=3``, DeiT's default): each sample 3 times per epoch with
  other draws, the copies on different ranks;
- progressive resolution: a linear ramp from 160 to 224 px (``linear_ramp``, FFCV's schedule),
  rounded to multiples of 32, set by ``set_epoch``;
- MixUp/CutMix and label smoothing on the normalized device batch (torchvision's v2 ops);
- exact evaluation after every epoch (``uneven="mask"``, the eval recipe at the full size).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torchvision.transforms import v2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_ddp import evaluate, small_resnet

from loaders import linear_ramp, make_loader, normalize


def recipe(size: int = 224) -> v2.Compose:
    """DeiT's train recipe (its size is replaced each epoch by the ramp)."""
    return v2.Compose(
        [
            v2.RandomResizedCrop(size, interpolation=v2.InterpolationMode.BICUBIC),
            v2.RandomHorizontalFlip(),
            v2.RandAugment(num_ops=2, magnitude=9),
            v2.RandomErasing(p=0.25),
        ]
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("src", help="the training data set")
    p.add_argument("--val", default=None, help="evaluation data set (default: SRC)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-steps-per-epoch", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--min-res", type=int, default=160)
    p.add_argument("--max-res", type=int, default=224)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", type=Path, default=None, help="per-rank JSON report (tests)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    torch.manual_seed(0)  # the same initial weights on every rank
    ramp = linear_ramp(args.min_res, args.max_res, end_ramp=max(1, args.epochs - 1))
    train = make_loader(
        args.src,
        args.batch_size,
        transform=recipe(args.max_res),
        image_size=ramp,  # replaces the crop's size each epoch
        repeats=args.repeats,
        drop_last=True,
        num_workers=args.workers,
        pin_memory=cuda,
    )
    val = make_loader(
        args.val or args.src,
        args.batch_size,
        train=False,
        image_size=args.max_res,
        shuffle=False,
        uneven="mask",
        num_workers=args.workers,
    )
    classes = max(2, len(train.dataset.index.classes))
    mix = v2.RandomChoice([v2.MixUp(num_classes=classes), v2.CutMix(num_classes=classes)])
    model = DDP(small_resnet(classes).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    report: dict = {"rank": rank, "len": len(train), "epochs": []}
    for epoch in range(args.epochs):
        train.set_epoch(epoch)
        model.train()
        steps, keys, sizes, losses = 0, [], set(), []
        for batch in train:
            x = normalize(batch["pixel_values"].to(device, non_blocking=True))
            x, soft = mix(x, batch["labels"].to(device, non_blocking=True))
            loss = F.cross_entropy(model(x), soft, label_smoothing=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            keys += batch["keys"]
            sizes.add(tuple(batch["pixel_values"].shape[-2:]))
            losses.append(loss.item())
            if args.max_steps_per_epoch and steps >= args.max_steps_per_epoch:
                break  # a short epoch: the loader's slots of the pass come back next epoch
        correct, total, _keys = evaluate(model.module, val, device, cuda)
        if rank == 0:
            print(
                f"epoch {epoch}: {steps} steps at {sorted(sizes)}, loss {sum(losses) / steps:.3f}"
                f", val top-1 {correct}/{total}",
                flush=True,
            )
        report["epochs"].append(
            {"steps": steps, "keys": keys, "sizes": sorted(sizes), "val_total": total}
        )
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
