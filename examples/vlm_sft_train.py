"""Fine-tuning on conversations (LLaVA, ShareGPT, the messages form) with the model's own chat
template and the loss on the assistant's replies, packed to a token budget, under torchrun.

    wdstool pack llava_instruct.json sft/shards          # LLaVA's .json as published
    torchrun --nproc_per_node=2 examples/vlm_sft_train.py --shards sft/shards \\
        --tokenizer my-model/ --image-token "<|image_pad|>" --length 2048 --batch-size 8 \\
        --checkpoint ckpt/ --save-every 500     # later, on any number of ranks: --resume

The tokenizer is a transformers ``save_pretrained`` folder saved with its chat template: the
loader's workers render each conversation with it (the ids are ``apply_chat_template``'s), expand
each image's placeholder to its run of tokens, and build the loss mask (``--loss assistant``:
the replies and the token that ends each; ``last``: the last reply; ``all``: every token), and
``labels`` (-100 outside the mask and where a sample begins in a packed row). Text-only
conversations are samples with no image: a batch may hold none. The model here runs its vision
encoder on the batch's image patches even when there are none (an empty input), so every
parameter takes part in every step and DDP never waits for a gradient that does not come
(with a model that skips its vision tower on such batches, pass
``find_unused_parameters=True`` to DDP instead).

``--model-family tiny`` trains examples/vlm_packed_train.py's stand-in, small enough for a CPU;
``qwen2-vl`` or ``llava`` a transformers model saved with ``save_pretrained`` (``--model``),
whose batches come as it takes them (``output.model_inputs(batch, device)``: its processor's
pixels, grids, 3-D positions, normalized on the device): no glue in the loop.
``--keys-out DIR`` logs each rank's keys per step (tests).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from loaders import (
    Chat,
    Interleaved,
    NativeResolution,
    Packing,
    TextTokenizer,
    make_loader,
    split_images,
)
from loaders.families import Llava, Qwen2VL

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the stand-in model beside this file
from vlm_packed_train import TinyVLM, load_checkpoint, open_keys_out, save_checkpoint


def sft_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy where ``labels`` is not -100 (the replies); 0 for a batch
    without any (a padding batch), keeping the graph."""
    target = labels[:, 1:]
    losses = F.cross_entropy(
        logits[:, :-1].transpose(1, 2), target, ignore_index=-100, reduction="sum"
    )
    return losses / (target != -100).sum().clamp(min=1)


def hf_model(folder: str, family: str) -> torch.nn.Module:
    """A transformers vision-language model saved with ``save_pretrained`` (local files only),
    to train."""
    from transformers import LlavaForConditionalGeneration, Qwen2VLForConditionalGeneration

    cls = Qwen2VLForConditionalGeneration if family == "qwen2-vl" else LlavaForConditionalGeneration
    return cls.from_pretrained(folder, local_files_only=True).train()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shards", required=True, help="packed conversations (a folder, index.json)")
    p.add_argument("--tokenizer", required=True, help="a save_pretrained folder with a template")
    p.add_argument("--image-token", default="<image>", help="the template's image placeholder")
    p.add_argument("--loss", default="assistant", choices=["assistant", "last", "all"])
    p.add_argument(
        "--model-family",
        default="tiny",
        choices=["tiny", "qwen2-vl", "llava"],
        help="tiny: the stand-in; qwen2-vl, llava: a transformers model from --model",
    )
    p.add_argument("--model", default=None, help="qwen2-vl, llava: a save_pretrained folder")
    p.add_argument("--processor", default=None, help="its image processor (default: --model)")
    p.add_argument("--length", type=int, default=2048, help="tokens a row (L)")
    p.add_argument("--batch-size", type=int, default=8, help="rows a batch, per rank")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--checkpoint", type=Path, default=None, help="checkpoint folder")
    p.add_argument("--save-every", type=int, default=100, help="steps between checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    p.add_argument("--max-steps", type=int, default=None, help="stop at this step")
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
    rule = NativeResolution(min_pixels=28 * 28, max_pixels=112 * 112)
    family = None
    if args.model_family != "tiny":  # the model's own inputs, from its processor's settings
        proc = args.processor or args.model
        family = (
            Qwen2VL.from_processor(proc)
            if args.model_family == "qwen2-vl"
            else Llava.from_processor(proc)
        )
    output = Interleaved(
        native=None if family else rule,
        model=family,
        tokenizer=tok,
        chat=Chat(loss=args.loss),
        packing=Packing(length=args.length),
    )
    loader = make_loader(
        args.shards,
        args.batch_size,
        label=None,  # the replies are the supervision: batch["labels"]
        output=output,
        num_workers=args.workers,
        pin_memory=cuda,
        cache_dir=args.cache_dir,
    )
    torch.manual_seed(0)
    if family is None:
        model = DDP(TinyVLM(tok.vocab_size, rule.patch).to(device))
    else:  # a text-only batch leaves the vision tower out of the step: let DDP know
        model = DDP(hf_model(args.model, args.model_family).to(device), find_unused_parameters=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    step, start_epoch = 0, 0
    if args.resume and args.checkpoint and (args.checkpoint / "latest.json").exists():
        step, start_epoch = load_checkpoint(args.checkpoint, model, opt, loader, rank)
    keys_out = open_keys_out(args.keys_out, rank)

    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)
        totals = torch.zeros(
            4, dtype=torch.float64, device=device
        )  # steps, loss tokens, images, loss
        for batch in loader:
            if family is None:
                ids = batch["input_ids"].to(device, non_blocking=True)
                labels = batch["labels"].to(device, non_blocking=True)
                images = split_images({**batch, "images": batch["images"].to(device)})  # or []
                loss = sft_loss(model(ids, images, batch), labels)
            else:  # the batch as the model takes it: no glue but moving it to the device
                inputs = output.model_inputs(batch, device)
                labels = inputs.pop("labels")
                loss = sft_loss(model(**inputs).logits, labels)
                images = range(len(batch["image_sizes"]))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            trained = int((batch["labels"] != -100).sum())
            totals += torch.tensor([1, trained, len(images), loss.item()], device=device)
            if keys_out is not None:
                line = {"epoch": epoch, "step": step, "keys": batch["keys"], "images": len(images),
                        "loss_tokens": trained, "loss": loss.item()}  # fmt: skip
                keys_out.write(json.dumps(line) + "\n")
                keys_out.flush()
            if args.checkpoint is not None and step % args.save_every == 0:
                save_checkpoint(args.checkpoint, step, model, opt, loader, rank, world)
            if step == args.max_steps:
                break
        dist.all_reduce(totals)
        n, trained, images, loss_sum = totals.tolist()
        if rank == 0:
            print(
                f"epoch {epoch}: {int(n) // world} steps a rank, {int(trained)} tokens in the "
                f"loss, {int(images)} images, mean loss {loss_sum / max(n, 1):.4f}",
                flush=True,
            )
        if step == args.max_steps:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
