"""Train a small ResNet with DDP on packed shards: the intended use of ``loaders``.

    torchrun --nproc_per_node=2 examples/train_ddp.py --data build/demo/shards --device cpu
    torchrun --nproc_per_node=8 examples/train_ddp.py --data s3://bucket/train --epochs 90 \
        --checkpoint ckpt/ --save-every 500 --resume

``--val DATA`` runs a validation pass after every epoch and prints the exact top-1 over all
ranks (``uneven="mask"``: every sample counted once, padding slots flagged ``valid=False``).

``--checkpoint DIR --save-every N`` saves model, optimizer and the loader's state every N steps
(every rank its own file, then rank 0 marks the step complete); ``--resume`` continues from the
last complete checkpoint mid-epoch, exactly where it stopped -- also on another number of ranks
or workers (each new rank loads the loader state of old rank ``rank % old_world_size``: they
describe the same history).

``--recipe NAME|module:attr`` trains with a named recipe (``loaders/recipe/presets.py``:
``timm-train``, ``tutorial``, ``trivialaug``...) or a pipeline of your own, in any library the
loader takes (torchvision v1/v2, timm, albumentations); its evaluation counterpart evaluates.
timm's own flags build timm's transform as its ``train.py`` does: ``--aa rand-m9-mstd0.5-inc1
--reprob 0.25 --interpolation random --crop-pct 0.95``. A recipe that normalizes hands float
batches (the loader follows the pipeline); uint8 batches are normalized on the device.

On CUDA: NCCL, AMP (bf16) and channels-last; workers ship uint8 batches (4x fewer bytes than
float32), pinned memory makes the host-to-device copy asynchronous, and ``normalize`` runs on
the GPU. With ``--device cpu`` it runs anywhere with gloo (what the tests do).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torchvision.models.resnet import BasicBlock, ResNet

from loaders import DeviceDecoder, make_loader, normalize


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--data", required=True, help="index.json, a folder/prefix holding one, or a brace pattern"
    )
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument(
        "--workers",
        type=lambda v: v if v == "auto" else int(v),
        default=None,
        help='DataLoader workers per rank; "auto": tuned from what the loader measures',
    )
    p.add_argument(
        "--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--keep-last",
        action="store_true",
        help="keep each rank's final partial batch (default: drop it, as reference training "
        "scripts do: a batch of one sample breaks BatchNorm)",
    )
    p.add_argument(
        "--on-error",
        choices=["raise", "skip"],
        default="raise",
        help="skip: replace a corrupt sample (every rank still takes the same steps)",
    )
    p.add_argument(
        "--max-replaced",
        type=_budget,
        default=0.1,
        help="with --on-error skip: samples a rank may replace per epoch, a count or a share "
        "(0.1: a tenth) before it stops; none: no limit",
    )
    p.add_argument(
        "--log-every", type=int, default=20, help="log step time and data wait every N steps"
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        help="node-local folder caching remote shards (shared by the ranks of a node)",
    )
    p.add_argument("--cache-limit", default=None, help="cache size limit, e.g. 500GB")
    p.add_argument(
        "--gpu-decode",
        action="store_true",
        help="workers ship compressed bytes; decode + augment on the device (nvJPEG on CUDA)",
    )
    p.add_argument("--checkpoint", type=Path, default=None, help="checkpoint folder")
    p.add_argument("--save-every", type=int, default=100, help="steps between checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    p.add_argument(
        "--keys-log",
        type=Path,
        default=None,
        help="append one JSON line per step (epoch, step, keys) to DIR/rank<R>.jsonl",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write a per-rank JSON report here (keys, steps, losses)",
    )
    p.add_argument(
        "--val",
        default=None,
        help="validation shards: after every epoch, exact top-1 over all ranks (every sample "
        "counted once: uneven='mask')",
    )
    p.add_argument("--save-model", type=Path, default=None, help="rank 0 saves the weights here")
    p.add_argument(
        "--num-classes",
        type=int,
        default=None,
        help="classes of the labels (default: the data set's index names them; someone else's "
        "shards often have no class list)",
    )
    p.add_argument(
        "--recipe",
        default=None,
        help="a named recipe (loaders/recipe/presets.py) or module:attr of a pipeline of yours",
    )
    timm = p.add_argument_group("timm's transform (as timm's train.py builds it)")
    timm.add_argument("--aa", default=None, help="auto_augment, e.g. rand-m9-mstd0.5-inc1")
    timm.add_argument("--reprob", type=float, default=None, help="RandomErasing probability")
    timm.add_argument("--interpolation", default=None, help="bilinear, bicubic or random")
    timm.add_argument("--crop-pct", type=float, default=None, help="evaluation crop share")
    return p.parse_args()


# a named train recipe's evaluation counterpart (None: the built-in eval recipe)
EVAL_OF = {
    "timm-train": "timm-eval",
    "tutorial": "tutorial-eval",
    "bicubic": "eval-bicubic",
    "randaug": "eval-bicubic",
    "trivialaug": "eval-bicubic",
}


def recipes(args: argparse.Namespace):
    """(train transform, eval transform): None, None for the built-in recipes."""
    from loaders.recipe.presets import resolve_transform

    if any(v is not None for v in (args.aa, args.reprob, args.interpolation, args.crop_pct)):
        from timm.data import create_transform

        interpolation = args.interpolation or "bilinear"
        train = create_transform(
            args.image_size,
            is_training=True,
            auto_augment=args.aa,
            re_prob=args.reprob or 0.0,
            interpolation=interpolation,
        )
        evaluate = create_transform(
            args.image_size,
            crop_pct=args.crop_pct,
            interpolation="bicubic" if interpolation == "random" else interpolation,
        )
        return train, evaluate
    if args.recipe is None:
        return None, None
    train = resolve_transform(args.recipe, args.image_size).transform
    evaluate = EVAL_OF.get(args.recipe)
    return train, None if evaluate is None else resolve_transform(
        evaluate, args.image_size
    ).transform


def to_device(batch: dict, device: torch.device) -> torch.Tensor:
    """The batch's pixels on the device, normalized: uint8 here, or already by the recipe."""
    x = batch["pixel_values"].to(device, non_blocking=True)
    return normalize(x) if x.dtype == torch.uint8 else x


def _budget(text: str) -> int | float | None:
    if text.lower() == "none":
        return None
    return float(text) if "." in text else int(text)


def small_resnet(num_classes: int) -> torch.nn.Module:
    """ResNet-10: one BasicBlock per stage."""
    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=num_classes)


def save_checkpoint(folder: Path, model, opt, loader, rank: int, world: int, epoch, step) -> None:
    """Every rank writes its file atomically; after a barrier rank 0 marks the step complete."""
    folder.mkdir(parents=True, exist_ok=True)
    tag = f"e{epoch}s{step}"
    path = folder / f"step{tag}-rank{rank}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "model": model.module.state_dict(),
            "optimizer": opt.state_dict(),
            "loader": loader.state_dict(),
        },
        tmp,
    )
    os.replace(tmp, path)
    dist.barrier()
    if rank == 0:
        latest = folder / "latest.json"
        tmp_latest = folder / "latest.json.tmp"
        tmp_latest.write_text(json.dumps({"step": tag, "world_size": world}))
        os.replace(tmp_latest, latest)


def evaluate(model, loader, device, cuda: bool) -> tuple[int, int, list[str]]:
    """Exact top-1 over all ranks: every rank runs the same number of batches of the same sizes
    (uneven="mask"); padding slots have ``valid=False`` and are not counted. One all_reduce."""
    model.eval()
    counts = torch.zeros(2, dtype=torch.int64, device=device)  # correct, counted
    keys: list[str] = []
    with torch.no_grad():
        for batch in loader:
            x = to_device(batch, device)
            y = batch["labels"].to(device, non_blocking=True)
            valid = batch["valid"].to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                pred = model(x).argmax(1)
            counts[0] += ((pred == y) & valid).sum()
            counts[1] += valid.sum()
            keys += [k for k, v in zip(batch["keys"], batch["valid"].tolist(), strict=True) if v]
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1]), keys


def main() -> None:
    args = parse_args()
    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)  # same initial weights on every rank

    train_tf, eval_tf = recipes(args)
    if args.gpu_decode and train_tf is not None:
        raise SystemExit("--gpu-decode runs the built-in recipe on the device: drop --recipe/--aa")
    loader = make_loader(
        args.data,
        args.batch_size,
        image_size=None if train_tf is not None else args.image_size,
        transform=train_tf,
        seed=args.seed,
        num_workers=args.workers,
        pin_memory=cuda,
        on_error=args.on_error,
        max_replaced=args.max_replaced,
        cache_dir=args.cache_dir,
        cache_limit=args.cache_limit,
        output="encoded" if args.gpu_decode else "auto",
        channels_last=cuda,  # the model's layout: the copy to the GPU needs no conversion
        drop_last=not args.keep_last,
    )
    decoder = DeviceDecoder(args.image_size, device=device) if args.gpu_decode else None
    val_loader = None
    if args.val is not None:
        val_loader = make_loader(
            args.val,
            args.batch_size,
            image_size=None if eval_tf is not None else args.image_size,
            transform=eval_tf,
            train=False,
            shuffle=False,
            uneven="mask",  # every sample exactly once over all ranks
            num_workers=args.workers,
            pin_memory=cuda,
        )
    num_classes = args.num_classes or max(len(loader.dataset.index.classes), 2)
    model = small_resnet(num_classes).to(device)
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    model = DDP(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    report: dict = {"rank": rank, "world_size": world, "len": len(loader), "epochs": []}
    start_epoch = 0
    if args.resume and args.checkpoint is not None and (args.checkpoint / "latest.json").exists():
        latest = json.loads((args.checkpoint / "latest.json").read_text())
        src = rank % latest["world_size"]  # the loader states of all old ranks share a history
        ckpt = torch.load(
            args.checkpoint / f"step{latest['step']}-rank{src}.pt", weights_only=False
        )
        model.module.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        loader.load_state_dict(ckpt["loader"])
        start_epoch = ckpt["loader"]["epoch"]
        if rank == 0:
            print(
                f"resumed from step {latest['step']} (epoch {start_epoch}, batch "
                f"{ckpt['loader']['batches']}) of a {latest['world_size']}-rank run",
                flush=True,
            )
    keys_log = None
    if args.keys_log is not None:
        args.keys_log.mkdir(parents=True, exist_ok=True)
        keys_log = (args.keys_log / f"rank{rank}.jsonl").open("a")
    global_step = 0

    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)
        first_step = loader.start_batch  # 0, or where a resumed epoch continues
        model.train()
        keys: list[str] = []
        losses: list[float] = []
        wait = step_time = epoch_wait = 0.0
        t_end = time.perf_counter()
        for step, batch in enumerate(loader, start=first_step):
            t_data = time.perf_counter()
            wait += t_data - t_end
            epoch_wait += t_data - t_end
            y = batch["labels"].to(device, non_blocking=True)
            # decoded, augmented and normalized on the device, or pixels from the workers
            x = decoder(batch) if decoder is not None else to_device(batch, device)
            if cuda:  # a no-op for channels-last batches; converts DeviceDecoder's output
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            keys.extend(batch["keys"])
            global_step += 1
            if keys_log is not None:
                keys_log.write(json.dumps({"epoch": epoch, "step": step, "keys": batch["keys"]}))
                keys_log.write("\n")
                keys_log.flush()
            if args.checkpoint is not None and global_step % args.save_every == 0:
                save_checkpoint(args.checkpoint, model, opt, loader, rank, world, epoch, step)
            t_end = time.perf_counter()
            step_time += t_end - t_data
            if rank == 0 and (step + 1) % args.log_every == 0:
                n = args.log_every
                print(
                    f"epoch {epoch} step {step + 1}/{len(loader)} loss {sum(losses[-n:]) / n:.3f} "
                    f"step {1000 * step_time / n:.1f} ms data-wait {1000 * wait / n:.1f} ms",
                    flush=True,
                )
                wait = step_time = 0.0
        mean = torch.tensor([sum(losses), len(losses)], dtype=torch.float64)
        dist.all_reduce(mean)
        stats = loader.stats()  # what the loader measured over this epoch, on this rank
        if rank == 0:
            print(
                f"epoch {epoch}: mean loss {mean[0] / mean[1]:.4f} over {len(losses)} steps per rank",
                flush=True,
            )
            print(f"epoch {epoch} loader: {loader.diagnose('epoch')}", flush=True)
        entry = {
            "epoch": epoch,
            "steps": len(losses),
            "keys": keys,
            "losses": losses,
            "replaced": loader.num_replaced,
            "wait_s": epoch_wait,  # the loop's own clock around next(), for the loader's
            "loader": stats.as_dict(),
        }
        if val_loader is not None:
            correct, total, val_keys = evaluate(model.module, val_loader, device, cuda)
            entry["val"] = {"correct": correct, "total": total, "keys": val_keys}
            if rank == 0:
                print(
                    f"epoch {epoch}: val top-1 {correct / total:.4f} ({correct}/{total})",
                    flush=True,
                )
        report["epochs"].append(entry)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"rank{rank}.json").write_text(json.dumps(report))
    if args.save_model is not None and rank == 0:
        torch.save(model.module.state_dict(), args.save_model)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
