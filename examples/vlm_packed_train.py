"""LLaVA-style training on interleaved image-text samples packed to a token budget, with DDP.

    torchrun --nproc_per_node=2 examples/vlm_packed_train.py --shards vl/shards \\
        --tokenizer tokenizer.json --length 2048 --batch-size 8 \\
        --checkpoint ckpt/ --save-every 500        # later: the same command with --resume

The shards hold samples of several images and text (``wdstool pack`` of an OBELICS- or
LLaVA-style listing: docs/guides/vision-language.md). The loader's workers decode each image
near its own size, lay each sample out as ids with one ``<image>`` placeholder per 28x28 patch,
and pack the samples into ``--batch-size`` rows of ``--length`` tokens, planned before the
epoch: every sample once per epoch over the ranks, the same number of steps on every rank,
and ``--resume`` continuing exactly, on the same or another number of ranks.

The model is a stand-in, small enough for a CPU: token embeddings, a patch embedding whose
features go to the image's placeholder positions, and a linear head predicting the next token
(a real one attends within each sample: ``cu_seqlens``/``max_seqlen`` are what
``flash_attn_varlen_func`` takes). ``--keys-out DIR`` logs each rank's keys per step (tests).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from loaders import (
    Interleaved,
    NativeResolution,
    Packing,
    TextTokenizer,
    make_loader,
    split_images,
)


def patchify(image: torch.Tensor, p: int) -> torch.Tensor:
    """[3, h, w] -> [h/p * w/p, 3*p*p]: the image's patches in row-major order, one per
    placeholder token of the image."""
    c, h, w = image.shape
    return image.view(c, h // p, p, w // p, p).permute(1, 3, 0, 2, 4).reshape(-1, c * p * p)


class TinyVLM(nn.Module):
    def __init__(self, vocab_size: int, patch: int, dim: int = 64) -> None:
        super().__init__()
        self.patch = patch
        self.embed = nn.Embedding(vocab_size, dim)
        self.vision = nn.Sequential(
            nn.Linear(3 * patch * patch, dim), nn.GELU(), nn.Linear(dim, dim)
        )
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, ids: torch.Tensor, images: list[torch.Tensor], batch: dict) -> torch.Tensor:
        B, L = ids.shape
        x = self.embed(ids).flatten(0, 1)  # [B*L, dim]
        # every image's patches through the encoder at once (none: an empty batch of patches)
        patches = [patchify(image, self.patch) for image in images]
        pixels = torch.cat(patches) if patches else ids.new_zeros((0, 3 * self.patch**2))
        features = self.vision(pixels.float() / 255 - 0.5)  # [patches, dim]
        # ... added at the image's placeholders: its row, its run of tokens in that row
        rows, spans = batch["image_row"].tolist(), batch["image_spans"].tolist()
        at = [r * L + start + torch.arange(n) for r, (start, n) in zip(rows, spans, strict=True)]
        where = torch.cat(at).to(x.device) if at else ids.new_zeros(0)
        x = x.index_add(0, where, features)
        return self.head(x.view(B, L, -1))  # [B, L, vocab]: the next token's logits


def next_token_loss(logits: torch.Tensor, batch: dict, device: torch.device) -> torch.Tensor:
    """Cross-entropy on the samples' text tokens; never across two samples of a row."""
    target = batch["input_ids"][:, 1:].to(device)
    mask = (batch["loss_mask"][:, 1:] & (batch["position_ids"][:, 1:] > 0)).to(device)
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), target, reduction="none")
    return (losses * mask).sum() / mask.sum().clamp(min=1)  # a padding batch: 0


def save_checkpoint(folder: Path, step: int, model, opt, loader, rank: int, world: int) -> None:
    """Every rank writes its own file; after a barrier rank 0 marks the step complete."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step{step}-rank{rank}.pt"
    state = {"model": model.module.state_dict(), "optimizer": opt.state_dict()}
    torch.save({**state, "loader": loader.state_dict(), "step": step}, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)
    dist.barrier()
    if rank == 0:
        (folder / "latest.tmp").write_text(json.dumps({"step": step, "world_size": world}))
        os.replace(folder / "latest.tmp", folder / "latest.json")


def load_checkpoint(folder: Path, model, opt, loader, rank: int) -> tuple[int, int]:
    """The latest complete step's model, optimizer and loader state; (step, epoch)."""
    latest = json.loads((folder / "latest.json").read_text())
    src = rank % latest["world_size"]  # any old rank's loader state: they share a history
    ckpt = torch.load(folder / f"step{latest['step']}-rank{src}.pt", weights_only=False)
    model.module.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    loader.load_state_dict(ckpt["loader"])  # another world size: re-planned exactly
    if rank == 0:
        print(f"resumed at step {ckpt['step']} of a {latest['world_size']}-rank run", flush=True)
    return ckpt["step"], ckpt["loader"]["epoch"]


def open_keys_out(folder: Path | None, rank: int):
    """``folder/rank<R>.jsonl``, appended to (the tests' record of each step's keys), or None."""
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return (folder / f"rank{rank}.jsonl").open("a")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shards", required=True, help="interleaved shards (a folder, index.json)")
    p.add_argument("--tokenizer", required=True, help="tokenizer.json or a saved folder")
    p.add_argument("--image-token", default="<image>", help="the placeholder, in the vocabulary")
    p.add_argument("--length", type=int, default=2048, help="tokens a row (L)")
    p.add_argument("--batch-size", type=int, default=8, help="rows a batch, per rank")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--checkpoint", type=Path, default=None, help="checkpoint folder")
    p.add_argument("--save-every", type=int, default=100, help="steps between checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    p.add_argument(
        "--max-steps", type=int, default=None, help="stop at this step (resumed ones count)"
    )
    p.add_argument("--cache-dir", default=None, help="where the samples' lengths are kept")
    p.add_argument("--keys-out", type=Path, default=None, help="DIR/rank<R>.jsonl: keys a step")
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = (
        torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    )
    if cuda:
        torch.cuda.set_device(device)

    tok = TextTokenizer(args.tokenizer, image_token=args.image_token)
    rule = NativeResolution(min_pixels=28 * 28, max_pixels=112 * 112)  # sides multiples of 28
    output = Interleaved(native=rule, tokenizer=tok, packing=Packing(length=args.length))
    loader = make_loader(
        args.shards,
        args.batch_size,
        label=None,  # the text is the supervision
        output=output,
        num_workers=args.workers,
        pin_memory=cuda,
        cache_dir=args.cache_dir,
    )
    torch.manual_seed(0)
    model = DDP(TinyVLM(tok.vocab_size, rule.patch).to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    step, start_epoch = 0, 0
    if args.resume and args.checkpoint and (args.checkpoint / "latest.json").exists():
        step, start_epoch = load_checkpoint(args.checkpoint, model, opt, loader, rank)
    keys_out = open_keys_out(args.keys_out, rank)

    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)  # after a resume: the rest of the checkpoint's epoch
        totals = torch.zeros(4, dtype=torch.float64, device=device)  # steps, tokens, samples, loss
        for batch in loader:
            ids = batch["input_ids"].to(device, non_blocking=True)
            images = split_images({**batch, "images": batch["images"].to(device)})
            loss = next_token_loss(model(ids, images, batch), batch, device)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            tokens = int((batch["input_ids"] != output.pad_id).sum())  # the samples' tokens
            totals += torch.tensor([1, tokens, len(batch["keys"]), loss.item()], device=device)
            if keys_out is not None:
                line = {"epoch": epoch, "step": step, "keys": batch["keys"], "loss": loss.item()}
                keys_out.write(json.dumps(line) + "\n")
                keys_out.flush()
            if args.checkpoint is not None and step % args.save_every == 0:
                save_checkpoint(args.checkpoint, step, model, opt, loader, rank, world)
            if step == args.max_steps:
                break
        dist.all_reduce(totals)  # over the ranks; every rank took the same steps
        n, tokens, samples, loss_sum = totals.tolist()
        if rank == 0:
            print(
                f"epoch {epoch}: {int(n) // world} steps a rank, {int(tokens)} tokens, "
                f"{int(samples)} samples, mean loss {loss_sum / max(n, 1):.4f}",
                flush=True,
            )
        if step == args.max_steps:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
