"""CLIP-style contrastive training on image + caption shards, with DDP: captions are tokenized in
the loader's workers and arrive as a batch tensor beside the pixels.

    torchrun --nproc_per_node=2 examples/clip_train.py --data data/laion-shards --device cpu

The data may be any WebDataset shards with ``KEY.jpg`` + ``KEY.txt`` (img2dataset's layout, a
``wdstool pack`` of a listing with a caption column, ...), with or without an index.json.
With ``--tokenizer tokenizer.json`` (your model's Hugging Face tokenizer, a file or a saved
folder) the captions are tokenized by it, built once per worker:
``tok = loaders.TextTokenizer(path, max_length=77)``,
``fields_fn=tok.fields("caption", to="caption_ids")`` and
``pad_fields={"caption_ids": tok.pad_id}`` (docs/guides/vision-language.md). Without it,
``Tokenize`` is a stand-in (words hashed to ids, 32 a caption), so the example runs without a
tokenizer file.
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

from loaders import TextTokenizer, make_loader, normalize
from loaders.bench.tokenize import VOCAB, Tokenize


class TinyCLIP(nn.Module):
    def __init__(self, vocab_size: int, pad_id: int, dim: int = 64) -> None:
        super().__init__()
        self.image = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, dim),
        )
        self.text = nn.EmbeddingBag(vocab_size, dim, mode="mean", padding_idx=pad_id)
        self.logit_scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, pixels: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        img = F.normalize(self.image(pixels), dim=-1)
        txt = F.normalize(self.text(ids), dim=-1)
        logits = self.logit_scale.exp() * img @ txt.t()
        target = torch.arange(len(img), device=img.device)
        return (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", required=True, help="shards: index.json, a folder, a brace pattern")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json or a saved folder")
    p.add_argument("--out", type=Path, default=None, help="per-rank JSON report (tests)")
    args = p.parse_args()

    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if args.tokenizer is not None:  # the real tokenizer: ids padded to the batch's longest
        tok = TextTokenizer(args.tokenizer, max_length=77)
        tokenize = tok.fields("caption", to="caption_ids")  # -> batch["caption_ids"]
        pad_fields = {"caption_ids": tok.pad_id}
        vocab, pad_id = tok.vocab_size, tok.pad_id
    else:  # the stand-in: -> batch["caption_ids"], int64 [B, 32], 0 where no word
        tokenize, pad_fields, vocab, pad_id = Tokenize("caption", length=32), None, VOCAB, 0
    loader = make_loader(
        args.data,
        args.batch_size,
        label=None,  # captions are the supervision
        fields={"caption": "txt"},
        fields_fn=tokenize,
        pad_fields=pad_fields,
        image_size=args.image_size,
        num_workers=args.workers,
        drop_last=True,  # a contrastive batch of one sample has no negatives
    )
    model = DDP(TinyCLIP(vocab, pad_id).to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    report = {"len": len(loader), "epochs": []}
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        keys, token_ids, losses = [], [], []
        for batch in loader:
            pixels = normalize(batch["pixel_values"].to(device, non_blocking=True))
            ids = batch["caption_ids"].to(device, non_blocking=True)
            loss = model(pixels, ids)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            keys.extend(batch["keys"])
            token_ids.extend(batch["caption_ids"].tolist())
            losses.append(loss.item())
        report["epochs"].append(
            {"steps": len(losses), "keys": keys, "ids": token_ids, "losses": losses}
        )
        if rank == 0:
            print(f"epoch {epoch}: {len(losses)} steps, mean loss {sum(losses) / len(losses):.3f}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
