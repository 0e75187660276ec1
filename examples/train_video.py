"""Train a small video classifier on clips with DDP, then evaluate it exactly.

    torchrun --nproc_per_node=2 examples/train_video.py --data shards/ --val val-shards/ \\
        --device cpu --epochs 2 --frames 8 --stride 2 --size 64

Training clips are drawn at random per (seed, epoch, key); evaluation takes ``--val-clips``
uniform clips of every validation video, each exactly once over the ranks (``uneven="mask"``),
and scores a video by the mean of its clips' logits. Each rank writes ``OUT/rank<R>.json``
(steps, keys, losses, the evaluated clips) when ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from loaders import Clips, make_loader, normalize


def model_for(classes: int) -> nn.Module:
    """A tiny 3D CNN over [B,3,T,H,W] clips."""
    return nn.Sequential(
        nn.Conv3d(3, 16, kernel_size=3, stride=(1, 2, 2), padding=1),
        nn.ReLU(),
        nn.Conv3d(16, 32, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(32, classes),
    )


def evaluate(model: nn.Module, args: argparse.Namespace, device: torch.device) -> dict:
    """Every (video, clip) once over the ranks; top-1 of each video's mean logits."""
    clips = Clips(
        frames=args.frames, stride=args.stride, clips_per_video=args.val_clips, layout="CTHW"
    )
    loader = make_loader(
        args.val,
        batch_size=args.batch_size,
        clips=clips,
        train=False,
        image_size=args.size,
        uneven="mask",
        num_workers=args.workers,
    )
    logits: dict[str, list[torch.Tensor]] = defaultdict(list)
    labels: dict[str, int] = {}
    seen = []
    model.eval()
    with torch.no_grad():
        for batch in loader:
            x = normalize(batch["video"].to(device), dim=-4)
            out = model(x).cpu()
            for i, key in enumerate(batch["keys"]):
                if batch["valid"][i]:
                    logits[key].append(out[i])
                    labels[key] = int(batch["labels"][i])
                    seen.append([key, int(batch["clip_index"][i])])
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (dict(logits), labels))
    merged: dict[str, list[torch.Tensor]] = defaultdict(list)
    for part, _ in everyone:
        for key, outs in part.items():
            merged[key].extend(outs)
    truth = {k: v for _, lab in everyone for k, v in lab.items()}
    correct = sum(int(torch.stack(o).mean(0).argmax()) == truth[k] for k, o in merged.items())
    model.train()
    return {"videos": len(merged), "top1": correct / max(1, len(merged)), "clips": seen}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--val")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--stride", type=int, default=2)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--val-clips", type=int, default=2)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    device = torch.device(args.device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank()
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    clips = Clips(frames=args.frames, stride=args.stride, layout="CTHW")
    loader = make_loader(
        args.data,
        batch_size=args.batch_size,
        clips=clips,
        image_size=args.size,
        num_workers=args.workers,
        drop_last=True,
    )
    classes = max(1, len(loader.dataset.index.classes or ()) or 10)
    model = model_for(classes).to(device)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    report: dict = {"len": len(loader), "epochs": []}
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        keys, losses = [], []
        for batch in loader:
            x = normalize(batch["video"].to(device, non_blocking=True), dim=-4)
            loss = nn.functional.cross_entropy(ddp(x), batch["labels"].to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            keys += batch["keys"]
            losses.append(float(loss))
        entry = {"epoch": epoch, "steps": len(losses), "keys": keys, "losses": losses}
        if args.val:
            entry["val"] = evaluate(ddp.module, args, device)
            if rank == 0:
                print(
                    f"epoch {epoch} val top-1 {entry['val']['top1']:.3f} over "
                    f"{entry['val']['videos']} videos",
                    flush=True,
                )
        if rank == 0:
            print(
                f"epoch {epoch}: {len(losses)} steps, mean loss "
                f"{sum(losses) / max(1, len(losses)):.3f}",
                flush=True,
            )
        report["epochs"].append(entry)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
