"""Fine-tuning batches: the loader's conversation path against the usual way, the same rows.

    python bench/vlm_sft_bench.py sft [--samples 1000] [--rounds 3] [--out bench/results/vlm-sft.md]
    python bench/vlm_sft_bench.py model-inputs [...] [--out bench/results/vlm-model-inputs.md]
    python bench/vlm_sft_bench.py run NAME --data DIR ...    # one pipeline, one JSON line

The data (made once under ``--data``, default bench/data/vlm-sft): ``--samples`` LLaVA-Instruct-like
conversations (70% one image, 10% two, 20% text only; 1-3 rounds of a question and an answer of
10-120 words) as LLaVA's ``.json``, photographs of nominal 320x240 to 1280x960 (``wdstool
sample-data``'s renderer), packed by ``wdstool pack``; a ChatML tokenizer saved with its chat
template, its replies marked with ``{% generation %}`` (tests/support/tokenizers_local.py); for
``model-inputs``, Qwen2-VL's image processor at its defaults but ``max_pixels`` 448*448.

``sft`` (issue 54), ids and the assistant-only loss mask, images at Qwen2-VL's sizes as uint8:

- ``wdstool``: ``make_loader(output=Interleaved(native=NativeResolution(...), tokenizer=...,
  chat=Chat(), packing=Packing(length=L)))``, ``--rows`` rows of L tokens a batch;
- ``usual``: HF ``datasets.load_dataset("json")`` of the same ``.json``, a ``DataLoader`` whose
  workers build each row's messages, ``tokenizer.apply_chat_template(..., tokenize=True,
  return_assistant_tokens_mask=True)``, decode and resize its images (PIL, torchvision's
  resize to the same size), expand each placeholder and pad a batch of ``--batch`` rows to its
  longest, labels -100 outside the replies (TRL's ``assistant_only_loss`` collate).

``model-inputs`` (issue 55), what ``Qwen2VLForConditionalGeneration`` takes:

- ``wdstool``: the same with ``model=Qwen2VL.from_processor(processor)``, each batch through
  ``model_inputs(batch)`` in the training process (normalization on the CPU here: what a GPU
  does in one call);
- ``processor-fast`` / ``processor-slow``: TRL's / LLaMA-Factory's way: DataLoader workers run
  ``tokenizer.apply_chat_template(..., tokenize=False)`` and ``Qwen2VLProcessor(text=...,
  images=...)`` with the torchvision image processor (fast) or the PIL one (slow), labels from
  the assistant masks: float32 ``pixel_values`` cross the process boundary.

Each run a fresh process, one epoch, 2 workers; samples/s (conversations) and tokens/s (not
padding) over the epoch after ``--warmup`` batches, the padded share of the rows, the bytes of
one batch's tensors (what crosses the process boundary). Rounds interleave the pipelines after
a warm one; ratios are medians. Every pipeline's ids, masks and (model-inputs) pixels of every
sample are checked equal to the others' by a digest per sample.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SIZES = [((320, 240), 2), ((640, 480), 4), ((480, 640), 2), ((800, 600), 3), ((1024, 768), 2),
         ((1280, 960), 1)]  # fmt: skip
WORDS = ["a", "the", "cat", "dog", "tree", "house", "red", "blue", "green", "small", "large", "photo", "picture", "shows", "two", "three", "people", "street", "car", "table", "cup", "of", "coffee", "on", "under", "next", "to", "near", "with", "in", "and", "is", "are"]  # fmt: skip
PIPELINES = {
    "sft": ("wdstool", "usual"),
    "model-inputs": ("wdstool", "processor-fast", "processor-slow"),
}
MIN_PIXELS, MAX_PIXELS = 56 * 56, 448 * 448


def _repo() -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def _say(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."


def prepare(data: Path, samples: int, pool: int = 16) -> None:
    if (data / f".done-{samples}").exists():
        return
    import shutil

    _repo()
    from shard_writer.sample_data import render
    from tests.support.tokenizers_local import chat_folder

    shutil.rmtree(data, ignore_errors=True)
    (data / "img").mkdir(parents=True)
    names = []
    for (w, h), weight in SIZES:
        for k in range(pool):
            name = f"img/{w}x{h}_{k:02d}.jpg"
            (data / name).write_bytes(render(0, k, 100, (w, h)))
            names += [name] * weight
    rng = random.Random(0)
    rows = []
    for i in range(samples):
        u = rng.random()
        images = [] if u < 0.2 else rng.sample(names, 2 if u > 0.9 else 1)
        turns = []
        for r in range(rng.randint(1, 3)):
            marks = "".join("<image>\n" for _ in images) if r == 0 else ""
            turns += [{"from": "human", "value": marks + _say(rng, 5, 20).rstrip(".") + "?"},
                      {"from": "gpt", "value": _say(rng, 10, 120)}]  # fmt: skip
        row: dict[str, Any] = {"id": f"sft-{i:06d}", "conversations": turns}
        if images:
            row["image"] = images if len(images) > 1 else images[0]
        rows.append(row)
    (data / "llava.json").write_text(json.dumps(rows))
    chat_folder(data / "tokenizer", "chatml", generation=True)
    subprocess.run([sys.executable, "-m", "wdstool", "pack", str(data / "llava.json"),
                    str(data / "shards"), "--max-count", "200", "-q"], check=True,
                   env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    (data / f".done-{samples}").touch()


def _processor(slow: bool = False) -> Any:
    from transformers import Qwen2VLImageProcessor, Qwen2VLImageProcessorPil

    cls = Qwen2VLImageProcessorPil if slow else Qwen2VLImageProcessor
    return cls(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)


def _messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for turn in row["conversations"]:
        pieces = turn["value"].split("<image>")
        content: list[dict[str, Any]] = []
        for n, piece in enumerate(pieces):
            if n:
                content.append({"type": "image"})
            if piece:
                content.append({"type": "text", "text": piece})
        out.append({"role": "user" if turn["from"] == "human" else "assistant", "content": content})
    return out


def _paths(row: dict[str, Any]) -> list[str]:
    img = row.get("image") or []
    return [img] if isinstance(img, str) else list(img)


# --- the pipelines ---------------------------------------------------------------------------
def wdstool_loader(args: argparse.Namespace, family: bool) -> tuple[Any, Any]:
    from loaders import Chat, Interleaved, NativeResolution, Packing, TextTokenizer, make_loader
    from loaders.families import Qwen2VL

    tok = TextTokenizer(str(args.data / "tokenizer"), image_token="<|image_pad|>")
    kw: dict[str, Any] = (
        {"model": Qwen2VL.from_processor(_processor())}
        if family
        else {"native": NativeResolution(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)}
    )
    spec = Interleaved(tokenizer=tok, chat=Chat(), packing=Packing(length=args.length), **kw)
    loader = make_loader(str(args.data / "shards"), args.rows, output=spec, label=None,
                         num_workers=args.workers, cache_dir=str(args.data / "cache"))  # fmt: skip
    return loader, spec


class Rows(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, data: Path) -> None:
        import datasets

        datasets.logging.set_verbosity_error()
        self.ds = datasets.load_dataset("json", data_files=str(data / "llava.json"), split="train",
                                        cache_dir=str(data / "hf"))  # fmt: skip
        self.data = data

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.ds[i]


class UsualCollate:
    """TRL's assistant-only collate: the chat template's ids and assistant mask, the images
    decoded and resized (Qwen2-VL's sizes), placeholders expanded, padded to the longest."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.tok = None

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from PIL import Image
        from torchvision.transforms.v2 import InterpolationMode
        from torchvision.transforms.v2.functional import pil_to_tensor, resize
        from transformers import AutoTokenizer
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        if self.tok is None:
            self.tok = AutoTokenizer.from_pretrained(
                str(self.data / "tokenizer"), local_files_only=True
            )
        pad_id = self.tok.convert_tokens_to_ids("<|image_pad|>")
        ids_list, masks, images, keys = [], [], [], []
        for row in rows:
            out = self.tok.apply_chat_template(_messages(row), tokenize=True, return_dict=True,
                                               return_assistant_tokens_mask=True)  # fmt: skip
            runs = []
            for path in _paths(row):
                img = pil_to_tensor(Image.open(self.data / path).convert("RGB"))
                h, w = smart_resize(img.shape[1], img.shape[2], 28, MIN_PIXELS, MAX_PIXELS)
                images.append(
                    resize(img, [h, w], interpolation=InterpolationMode.BICUBIC, antialias=True)
                )
                runs.append((h // 28) * (w // 28))
            ids, mask, it = [], [], iter(runs)
            for t, m in zip(out["input_ids"], out["assistant_masks"], strict=True):
                n = next(it) if t == pad_id else 1
                ids += [t] * n
                mask += [bool(m)] * n
            ids_list.append(ids)
            masks.append(mask)
            keys.append(row["id"])
        longest = max(map(len, ids_list))
        pad = self.tok.pad_token_id
        input_ids = torch.full((len(rows), longest), pad, dtype=torch.long)
        labels = torch.full((len(rows), longest), -100, dtype=torch.long)
        loss_mask = torch.zeros((len(rows), longest), dtype=torch.bool)
        for r, (ids, mask) in enumerate(zip(ids_list, masks, strict=True)):
            input_ids[r, : len(ids)] = torch.tensor(ids)
            loss_mask[r, : len(mask)] = torch.tensor(mask)
            labels[r, : len(ids)] = torch.where(
                loss_mask[r, : len(ids)], input_ids[r, : len(ids)], -100
            )
        return {"input_ids": input_ids, "labels": labels, "loss_mask": loss_mask, "keys": keys,
                "images": images}  # fmt: skip


class ProcessorCollate:
    """TRL's / LLaMA-Factory's way for Qwen2-VL: the template's text, then Qwen2VLProcessor on
    text and images (float32 pixel_values, grids, expanded ids), labels from the replies."""

    def __init__(self, data: Path, slow: bool) -> None:
        self.data, self.slow = data, slow
        self.proc = None

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from PIL import Image
        from transformers import AutoTokenizer, Qwen2VLProcessor, Qwen2VLVideoProcessor

        if self.proc is None:
            tok = AutoTokenizer.from_pretrained(str(self.data / "tokenizer"), local_files_only=True)
            self.proc = Qwen2VLProcessor(
                video_processor=Qwen2VLVideoProcessor(),image_processor=_processor(self.slow), tokenizer=tok,
                                         chat_template=tok.chat_template)  # fmt: skip
        tok = self.proc.tokenizer
        texts, images, spans = [], [], []
        for row in rows:
            msgs = _messages(row)
            text, gen = _render_with_spans(tok, msgs)
            texts.append(text)
            spans.append(gen)
            images += [Image.open(self.data / p).convert("RGB") for p in _paths(row)]
        out = self.proc(text=texts, images=images or None, padding=True, return_tensors="pt",
                        return_offsets_mapping=True)  # fmt: skip
        offsets = out.pop("offset_mapping")
        mask = torch.zeros_like(out["input_ids"], dtype=torch.bool)
        # the processor repeats each image's placeholder (its grid's tokens) before tokenizing:
        # the replies' characters move by the repeats before them
        mark = "<|image_pad|>"
        runs = iter((out["image_grid_thw"].prod(-1) // 4).tolist() if images else [])
        moved = []
        for text, gen in zip(texts, spans, strict=True):
            at, shifts = 0, []
            while (at := text.find(mark, at)) >= 0:
                shifts.append((at, (next(runs) - 1) * len(mark)))
                at += len(mark)
            moved.append([(a + sum(d for c, d in shifts if c < a), b + sum(d for c, d in shifts if c < b))
                          for a, b in gen])  # fmt: skip
        spans = moved
        for r, gen in enumerate(spans):  # the replies' characters -> tokens (transformers' rule)
            for t, (a, b) in enumerate(offsets[r].tolist()):
                mask[r, t] = b > a and any(b > s and a < e for s, e in gen)
        out["labels"] = out["input_ids"].masked_fill(~mask, -100)
        out["loss_mask"] = mask
        out["keys"] = [row["id"] for row in rows]
        return dict(out)


def _render_with_spans(
    tok: Any, messages: list[dict[str, Any]]
) -> tuple[str, list[tuple[int, int]]]:
    from transformers.utils.chat_template_utils import render_jinja_template

    texts, gens = render_jinja_template(conversations=[messages], chat_template=tok.chat_template,
                                        return_assistant_tokens_mask=True, **tok.special_tokens_map)  # fmt: skip
    return texts[0], gens[0]


def usual_loader(args: argparse.Namespace, collate: Any) -> Any:
    return torch.utils.data.DataLoader(Rows(args.data), batch_size=args.batch, shuffle=False,
                                       num_workers=args.workers, collate_fn=collate,
                                       prefetch_factor=4)  # fmt: skip


def _nbytes(batch: dict[str, Any]) -> int:
    total = 0
    for v in batch.values():
        if isinstance(v, torch.Tensor):
            total += v.numel() * v.element_size()
        elif isinstance(v, list) and v and isinstance(v[0], torch.Tensor):
            total += sum(t.numel() * t.element_size() for t in v)
    return total


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    _repo()
    t0 = time.perf_counter()
    spec = None
    if args.pipeline == "wdstool":
        loader, spec = wdstool_loader(args, family=args.what == "model-inputs")
    elif args.pipeline == "usual":
        loader = usual_loader(args, UsualCollate(args.data))
    else:
        loader = usual_loader(
            args, ProcessorCollate(args.data, slow=args.pipeline.endswith("slow"))
        )
    stamps, samples, tokens, cells, pad, crossing = [], [], [], 0, 0, []
    digests: dict[str, int] = {}
    pixels = 0  # model-inputs: a sum of every image's pixel_values crc (order free)
    for batch in loader:
        if spec is not None and args.what == "model-inputs":
            crossing.append(
                _nbytes({k: v for k, v in batch.items() if isinstance(v, torch.Tensor)})
            )
            inputs = spec.model_inputs(batch, "cpu")  # what a GPU does in one call
            ids, labels = inputs["input_ids"], inputs["labels"]
            pixels += _pixels(inputs)
        else:
            crossing.append(_nbytes(batch))
            ids, labels = batch["input_ids"], batch["labels"]
            pixels += _pixels(batch)
        used = ids != (0 if spec is None else spec.pad_id)
        stamps.append(time.perf_counter())
        samples.append(len(batch["keys"]))
        tokens.append(int(used.sum()))
        cells += ids.numel()
        pad += ids.numel() - int(used.sum())
        digests.update(_digests(batch, labels, spec))
    n = len(stamps)
    k = min(args.warmup, n // 2)
    timed = stamps[-1] - stamps[k - 1] if k else stamps[-1] - t0
    return {
        "pipeline": args.pipeline,
        "samples": sum(samples),
        "samples_per_s": sum(samples[k:]) / timed,
        "tokens_per_s": sum(tokens[k:]) / timed,
        "first_batch_s": stamps[0] - t0,
        "epoch_s": stamps[-1] - t0,
        "padded_share": pad / cells,
        "batch_bytes": statistics.median(crossing),
        "batch_samples": statistics.median(samples),
        "digest": f"{sum(digests.values()) % (1 << 32):08x}",
        "pixels": f"{pixels % (1 << 32):08x}",
        "distinct": len(digests),
    }


def _pixels(inputs: dict[str, Any]) -> int:
    """A sum of each image's pixel_values crc (its patches: the grid's product of them)."""
    if "pixel_values" not in inputs:
        return 0
    at, total = 0, 0
    for n in inputs["image_grid_thw"].prod(-1).tolist():
        total += zlib.crc32(inputs["pixel_values"][at : at + n].contiguous().numpy().tobytes())
        at += n
    return total


def _digests(batch: dict[str, Any], labels: torch.Tensor, spec: Any) -> dict[str, int]:
    """Per sample: a crc of its trained tokens (the labels that are not -100), by key."""
    out = {}
    if "sample_row" in batch:  # packed: a sample's entries are its row's segments
        rows = batch["sample_row"].tolist()
        pos = batch["position_ids"]
        starts: dict[int, list[int]] = {}
        for r in set(rows):
            starts[r] = [int(c) for c in (pos[r] == 0).nonzero().flatten()]
        taken: dict[int, int] = {}
        for key, r in zip(batch["keys"], rows, strict=True):
            j = taken.get(r, 0)
            taken[r] = j + 1
            a = starts[r][j]
            b = starts[r][j + 1] if j + 1 < len(starts[r]) else labels.shape[1]
            got = labels[r, a:b]
            out[key] = zlib.crc32(got[got != -100].numpy().tobytes())
        return out
    for r, key in enumerate(batch["keys"]):
        got = labels[r]
        out[key] = zlib.crc32(got[got != -100].numpy().tobytes())
    return out


# --- the driver ------------------------------------------------------------------------------
def spawn(args: argparse.Namespace, name: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "run", name, "--what", args.what, "--data", str(args.data),
           "--length", str(args.length), "--rows", str(args.rows), "--batch", str(args.batch),
           "--workers", str(args.workers), "--warmup", str(args.warmup)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        return {
            "pipeline": name,
            "error": (proc.stderr or proc.stdout).strip().splitlines()[-1][:300],
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(args: argparse.Namespace, runs: list[dict[str, Any]]) -> str:
    names = PIPELINES[args.what]
    timed = [r for r in runs if r.get("round", 0) and "error" not in r]

    def med(name: str, key: str) -> float:
        vals = [r[key] for r in timed if r["pipeline"] == name and r.get(key) is not None]
        return statistics.median(vals) if vals else float("nan")

    title = {"sft": "Fine-tuning on conversations: the loader against the usual way",
             "model-inputs": "Qwen2-VL's inputs: the loader against its processor in DataLoader workers"}  # fmt: skip
    lines = [
        f"# {title[args.what]}",
        "",
        f"`python bench/vlm_sft_bench.py {' '.join(sys.argv[1:])}`",
        "",
        f"{args.samples:,} LLaVA-Instruct-like conversations (see the script), {args.workers} "
        f"workers; wdstool packs rows of {args.length} tokens, {args.rows} a batch; the others "
        f"batch {args.batch} conversations padded to the longest. {args.rounds} rounds after a warm "
        f"one, pipelines interleaved, medians; rates after {args.warmup} batches. Machine: "
        f"{os.cpu_count()} cores.",
        "",
        "| pipeline | conversations/s | tokens/s | wdstool ÷ it (conversations/s) | padded share "
        "| bytes a batch | per conversation | first batch s | epoch s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ours = med("wdstool", "samples_per_s")
    for name in names:
        rows = [r for r in timed if r["pipeline"] == name]
        if not rows:
            err = next((r.get("error") for r in runs if r["pipeline"] == name), "no run")
            lines.append(f"| {name} | {err} | | | | | | | |")
            continue
        sps = med(name, "samples_per_s")
        pshare = med(name, "padded_share")
        per = med(name, "batch_bytes") / med(name, "batch_samples")
        lines.append(
            f"| {name} | {sps:,.1f} | {med(name, 'tokens_per_s'):,.0f} | "
            f"{'' if name == 'wdstool' else f'**{ours / sps:.2f}**'} | "
            f"{pshare:.1%} | {med(name, 'batch_bytes') / 1e6:,.2f} MB | "
            f"{per / 1e3:,.0f} KB | {med(name, 'first_batch_s'):.2f} | {med(name, 'epoch_s'):.1f} |"
        )
    digests = {r["digest"] for r in runs if "error" not in r}
    same = "yes" if len(digests) == 1 else "NO: " + ", ".join(sorted(digests))
    lines += [
        "",
        f"Same trained tokens of every conversation in every run of every pipeline: {same}",
    ]
    if args.what == "model-inputs":
        by = {
            n: {r["pixels"] for r in runs if r["pipeline"] == n and "error" not in r} for n in names
        }
        lines.append(
            "Same pixel_values of every image as wdstool's: "
            + ", ".join(f"{n} {'yes' if by[n] == by['wdstool'] else 'no'}" for n in names[1:])
            + " (the PIL processor resizes with Pillow, not torchvision)"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("action", choices=["sft", "model-inputs", "run"])
    p.add_argument("pipeline", nargs="?")
    p.add_argument("--what", default="sft", choices=["sft", "model-inputs"])
    p.add_argument("--data", type=Path, default=HERE / "data" / "vlm-sft")
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--rows", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    if args.action == "run":
        print(json.dumps(run_one(args)), flush=True)
        return
    args.what = args.action
    prepare(args.data, args.samples)
    runs = []
    for rnd in range(args.rounds + 1):
        for name in PIPELINES[args.what]:
            r = spawn(args, name)
            r["round"] = rnd
            runs.append(r)
            print(json.dumps(r), flush=True)
    text = report(args, runs)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(
            json.dumps({"argv": sys.argv[1:], "runs": runs}, indent=1)
        )


if __name__ == "__main__":
    main()
