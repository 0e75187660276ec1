"""Batch-level augmentation on the device: MixUp/CutMix and RandomErasing after normalize.

The loader runs a sample's recipe in its workers (the crop fused into the decoder, RandAugment on
the small uint8 crop); what needs the whole batch, or normalized values, runs on the training
device with torchvision's own ops:

    python examples/device_augment.py DATA [--steps 20] [--device cuda]

MixUp and CutMix mix pairs of samples of a batch and give soft labels ([B, classes]);
RandomErasing after Normalize erases normalized values (timm's ``re_mode="pixel"`` draws the
fill from a normal distribution: ``value="random"``). ``v2.RandomErasing`` called on a whole
batch erases one box in every image, so it is applied per sample.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torchvision.transforms import v2

from loaders import make_loader, normalize


def num_classes(source: str) -> int:
    manifest = json.loads((Path(source) / "index.json").read_text())
    return len(manifest.get("classes") or []) or 1000


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("data", help="a wdstool data set (folder with index.json)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    classes = num_classes(args.data)

    recipe = v2.Compose(  # in the workers, per sample, on uint8 crops
        [
            v2.RandomResizedCrop(args.image_size, interpolation=v2.InterpolationMode.BICUBIC),
            v2.RandomHorizontalFlip(),
            v2.RandAugment(num_ops=2, magnitude=9),
        ]
    )
    loader = make_loader(
        args.data, args.batch_size, transform=recipe, num_workers=args.workers, drop_last=True
    )
    print(f"recipe: {loader.recipe}")
    # on the device, per batch (MixUp/CutMix) and per normalized sample (RandomErasing)
    mix = v2.RandomChoice([v2.MixUp(num_classes=classes), v2.CutMix(num_classes=classes)])
    erase = v2.RandomErasing(p=0.25, value="random")
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, classes),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    while step < args.steps:
        loader.set_epoch(step // max(1, len(loader)))
        for batch in loader:
            x = normalize(batch["pixel_values"].to(device, non_blocking=True))
            x, soft = mix(x, batch["labels"].to(device, non_blocking=True))
            x = torch.stack([erase(img) for img in x])
            loss = torch.nn.functional.cross_entropy(model(x), soft)  # soft targets
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            print(f"step {step}: loss {loss.item():.3f}, labels {tuple(soft.shape)}")
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
