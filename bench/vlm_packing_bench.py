"""Packed vision-language loading: wdstool's loader against Megatron-Energon and Hugging Face
``datasets``, the same shards, images, tokenizer and packing.

    python bench/vlm_packing_bench.py [--samples 2000] [--length 4096] [--rows 4] [--workers 2]
        [--rounds 3] [--data bench/data/vlm] [--out bench/results/vlm-packing.md]
    python bench/vlm_packing_bench.py run NAME --data DIR ...   # one pipeline, one JSON line
    python bench/vlm_packing_bench.py grid --pipelines wdstool,energon --data bench/data
        [--grid-samples 400,800,2000,8000] [--grid-workers 2,4]   # by samples a rank x workers

The data set (generated once under ``--data``, reused while its settings match): ``--samples``
interleaved documents packed by ``wdstool pack`` from an OBELICS-style listing (``KEY.0.jpg`` ..
``KEY.3.jpg`` and ``KEY.json`` with parallel ``texts``/``images`` lists), in a stated mix:

- 40% captions: one image, then a caption of 8-30 words;
- 35% articles: a title of 5-15 words, then 2-3 images, each followed by 40-200 words;
- 25% documents: 3-4 images, each between paragraphs of 150-500 words.

Images are photographs (``wdstool sample-data``'s renderer) of nominal 320x240 (weight 2),
640x480 (4), 480x640 (2), 800x600 (3), 1024x768 (2) and 1280x960 (1), drawn from a pool of
``--pool`` distinct JPEGs per size (the shards hold each sample's own copy). Text is words of a
small vocabulary; the tokenizer a byte-level BPE with ``<image>`` trained on them
(tests/support/tokenizers_local.py), saved as ``tokenizer.json``.

Every pipeline does the same work per sample: each image's output size by Qwen2-VL's rule
(``NativeResolution().size``: a pixel budget of 56*56..28*28*1280, sides multiples of 28), the
image decoded and resized to it (bicubic, antialiased, torchvision), one ``<image>`` token per
28x28 patch, the text segments tokenized with the same ``tokenizer.json`` and ``<s>``/``</s>``
around the sample; samples packed best-fit (``loaders.plan.packing.pack_sequences``, at most
``--open-sequences`` open) over buffers of ``--window`` samples into rows of ``--length``
tokens, a sample longer than that truncated (an image whose placeholders it cuts dropped), and
``--rows`` rows a batch as ``input_ids``, ``position_ids``, ``loss_mask``, ``cu_seqlens``, the
images as one flat uint8 buffer with ``image_sizes``, ``image_row``, ``image_spans``:

- ``wdstool``: ``make_loader(output=Interleaved(native=NativeResolution(), tokenizer=
  TextTokenizer(...), packing=Packing(length, window, open_sequences)))``: lengths from the
  image headers and text once (kept in ``DATA/cache``), the epoch planned in windows;
- ``energon``: Megatron-Energon (what Megatron-Bridge trains Qwen-VL with) on the same tar files
  (``DATA/energon``: links to them, prepared by ``energon prepare`` as a ``CrudeWebdataset``),
  a cooker for the layout, a ``TaskEncoder`` whose ``preencode_sample`` tokenizes and sizes the
  images from their headers, ``select_samples_to_pack`` packs each ``packing_buffer_size``
  buffer, ``postencode_sample`` decodes the chosen samples' images, ``pack_selected_samples``
  lays out a row and ``batch`` stacks ``--rows`` of them; ``get_train_dataset(repeat=False)``
  and ``get_savable_loader``, as Megatron-Bridge builds them;
- ``hf``: ``datasets.load_dataset("webdataset", streaming=True)`` over the tar files (features
  given: the builder refuses to infer them from samples of different image counts), ``.map``
  tokenizing and sizing, and in each DataLoader worker a buffer of ``--window`` samples packed
  the same way and collated ``--rows`` rows at a time (images decoded there).

Measured per run (a fresh process, one epoch): packed sequences/s, images/s and tokens/s (not
padding) after ``--warmup`` batches (startup excluded; time to the first batch reported apart),
the padded share of the non-empty rows (tokens/s is the fairer rate where the pipelines' packing
differs: each worker of a peer packs the samples it reads, in its order), and what was delivered
in all (samples, tokens, images, a sum of the token ids, the set of sample keys), which must
agree between pipelines. Rounds interleave the pipelines, ``--rounds`` times after one untimed
warm round; the ratios are wdstool's median over the peer's, both from this run.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PIPELINES = ("wdstool", "energon", "hf")
TITLES = {
    "wdstool": "wdstool `make_loader(output=Interleaved(packing=Packing(...)))`",
    "energon": "Megatron-Energon `TaskEncoder` packing",
    "hf": "HF `datasets` streaming + packing collate",
}
MAX_IMAGES = 4
# (nominal width, height), weight
SIZES = [((320, 240), 2), ((640, 480), 4), ((480, 640), 2), ((800, 600), 3), ((1024, 768), 2),
         ((1280, 960), 1)]  # fmt: skip
# kind, share, images (min, max), words per text (min, max)
MIX = [("caption", 0.40, (1, 1), (8, 30)), ("article", 0.35, (2, 3), (40, 200)),
       ("document", 0.25, (3, 4), (150, 500))]  # fmt: skip
DATA_VERSION = 1


# --- the data set ------------------------------------------------------------------------------


def _repo_on_path() -> None:
    """tests.support (the local tokenizer) and the project import from the checkout."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def _words() -> list[str]:
    _repo_on_path()
    from tests.support.tokenizers_local import TEXT

    words = {w.strip(".,;:").lower() for line in TEXT for w in line.split()}
    return sorted(w for w in words if w)


def _text(rng: random.Random, words: list[str], lo: int, hi: int) -> str:
    n = rng.randint(lo, hi)
    out, sentence = [], 0
    for _ in range(n):
        w = rng.choice(words)
        out.append(w.capitalize() if sentence == 0 else w)
        sentence += 1
        if sentence >= rng.randint(6, 18):
            out[-1] += "."
            sentence = 0
    return " ".join(out) + "."


def _rows(samples: int, seed: int, pool: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The listing: OBELICS-style rows (``texts``, ``images`` parallel lists), and each row's
    kind."""
    rng = random.Random(seed)
    words = _words()
    sizes, weights = zip(*SIZES, strict=True)
    kinds, shares = [m[0] for m in MIX], [m[1] for m in MIX]
    spec = {m[0]: m for m in MIX}
    rows, drawn = [], []
    for _ in range(samples):
        kind = rng.choices(kinds, shares)[0]
        drawn.append(kind)
        _k, _s, (imin, imax), (wmin, wmax) = spec[kind]
        images = []
        for _j in range(rng.randint(imin, imax)):
            w, h = rng.choices(sizes, weights)[0]
            images.append(f"img/{w}x{h}_{rng.randrange(pool):03d}.jpg")
        texts: list[str | None] = []
        paths: list[str | None] = []
        if kind == "caption":
            paths += [images[0], None]
            texts += [None, _text(rng, words, wmin, wmax)]
        else:
            if kind == "article":
                texts.append(_text(rng, words, 5, 15))
            else:
                texts.append(_text(rng, words, wmin, wmax))
            paths.append(None)
            for p in images:
                paths += [p, None]
                texts += [None, _text(rng, words, wmin, wmax)]
        rows.append({"texts": texts, "images": paths})
    return rows, drawn


def prepare(data: Path, samples: int, seed: int, pool: int, shards: int) -> dict[str, Any]:
    """Generate (or reuse) DATA: images, listing, tokenizer, wdstool shards."""
    want = {
        "version": DATA_VERSION,
        "samples": samples,
        "seed": seed,
        "pool": pool,
        "shards": shards,
    }
    spec_path = data / "spec.json"
    if spec_path.exists() and json.loads(spec_path.read_text()).get("want") == want:
        return json.loads(spec_path.read_text())
    import shutil

    _repo_on_path()
    from shard_writer.sample_data import render
    from tests.support.tokenizers_local import save_json, train_tokenizer

    for sub in ("shards", "energon", "cache", "hf", "img"):
        shutil.rmtree(data / sub, ignore_errors=True)
    data.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for (w, h), _weight in SIZES:
        for k in range(pool):
            path = data / "img" / f"{w}x{h}_{k:03d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(render(seed, k, 100, (w, h)))
    rows, kinds = _rows(samples, seed, pool)
    listing = data / "docs.jsonl"
    listing.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    rng = random.Random(seed + 1)
    words = _words()
    corpus = [_text(rng, words, 10, 40) for _ in range(400)]
    save_json(data / "tokenizer.json", train_tokenizer(extra=corpus, vocab_size=1000))
    per_shard = max(1, math.ceil(samples / shards))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, "-m", "wdstool", "pack", str(listing), str(data / "shards"),
         "--max-count", str(per_shard), "--overwrite", "-q"],
        check=True, env=env,
    )  # fmt: skip
    t_pack = time.perf_counter() - t0
    tars = sorted((data / "shards").glob("*.tar"))
    meta = {
        "want": want,
        "tars": [t.name for t in tars],
        "images": sum(sum(p is not None for p in r["images"]) for r in rows),
        "kinds": {k: kinds.count(k) for k, *_ in MIX},
        "generate_and_pack_s": round(t_pack, 1),
    }
    spec_path.write_text(json.dumps(meta, indent=1))
    return meta


def energon_python(choice: str | None) -> tuple[str | None, str]:
    """The interpreter the energon runs use, or None and why not: ``--energon-python``, else
    .venv-peers' (where `make bench-vlm` installs Megatron-Energon) or this one, whichever
    imports it."""
    tried = [choice] if choice else [str(REPO / ".venv-peers" / "bin" / "python"), sys.executable]
    for py in tried:
        if py and Path(py).exists():
            ok = subprocess.run([py, "-c", "import megatron.energon"], capture_output=True)
            if ok.returncode == 0:
                return py, ""
    return None, (
        f"megatron-energon is not installed in {' or '.join(tried)} (make bench-vlm installs it "
        "into .venv-peers; or pip install megatron-energon)"
    )


def energon_folder(data: Path, meta: dict[str, Any], py: str) -> float:
    """DATA/energon: links to the same tar files, prepared by ``energon prepare`` (its index files
    land beside the links) as a CrudeWebdataset; the seconds it took (0 when already there)."""
    edir = data / "energon"
    if (edir / ".nv-meta" / "dataset.yaml").exists():
        return 0.0
    import shutil

    shutil.rmtree(edir, ignore_errors=True)
    edir.mkdir(parents=True)
    for name in meta["tars"]:
        (edir / name).symlink_to(Path("..") / "shards" / name)
    t = time.perf_counter()
    subprocess.run(
        [str(Path(py).with_name("energon")), "prepare", str(edir), "--non-interactive",
         "--split-parts", r"train:.*\.tar", "--sample-type", "CrudeWebdataset", "--no-progress",
         "--num-workers", "2"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return round(time.perf_counter() - t, 1)


# --- what every pipeline shares ----------------------------------------------------------------


class Rule:
    """The per-sample work every pipeline does: the tokenizer (built once per process), each
    image's output size and placeholder tokens, the decode and resize."""

    def __init__(self, tokenizer: str, mode: str = "torchvision") -> None:
        self.tokenizer_path = tokenizer
        self.mode = mode
        self._tok: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"tokenizer_path": self.tokenizer_path, "mode": self.mode, "_tok": None}

    @property
    def tok(self) -> Any:
        if self._tok is None:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(self.tokenizer_path)
            self._tok.no_padding()
            self._tok.no_truncation()
            self.bos = self._tok.token_to_id("<s>")
            self.eos = self._tok.token_to_id("</s>")
            self.pad = self._tok.token_to_id("<pad>")
            self.image = self._tok.token_to_id("<image>")
        return self._tok

    def out_size(self, width: int, height: int) -> tuple[int, int]:
        """(h, w) by Qwen2-VL's rule: wdstool's NativeResolution().size, as its loader sizes."""
        from loaders import NativeResolution

        return NativeResolution().size(height, width)

    def encode(
        self, segments: list[str | int], sizes: list[tuple[int, int]]
    ) -> tuple[list[int], list[tuple[int, int]]]:
        """(ids, each image's placeholder run (start, length)) of one sample: ``<s>``, text
        segments tokenized without special tokens, ``(h//28)*(w//28)`` ``<image>`` ids per image,
        ``</s>``."""
        tok = self.tok
        ids = [self.bos]
        runs = []
        for seg in segments:
            if isinstance(seg, str):
                ids += tok.encode(seg, add_special_tokens=False).ids
            else:
                h, w = sizes[seg]
                n = (h // 28) * (w // 28)
                runs.append((len(ids), n))
                ids += [self.image] * n
        ids.append(self.eos)
        return ids, runs

    def decode(self, data: bytes, size: tuple[int, int]) -> torch.Tensor:
        """uint8 [3,h,w] at ``size``: torchvision's decode_image and resize (bicubic,
        antialiased); ``--peer-images wdstool``: wdstool's NativeResolution (the same pixels
        decoded channels-last, which its resize runs faster on)."""
        if self.mode == "wdstool":
            from loaders import NativeResolution

            return NativeResolution()(data)
        from torchvision.io import ImageReadMode, decode_image
        from torchvision.transforms.v2 import InterpolationMode
        from torchvision.transforms.v2.functional import resize

        img = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), ImageReadMode.RGB)
        if tuple(img.shape[-2:]) == size:
            return img
        return resize(img, list(size), interpolation=InterpolationMode.BICUBIC, antialias=True)


def header_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the image's header (PIL opens lazily: no pixels decoded)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return im.size


def segments_of(meta: dict[str, Any]) -> tuple[list[str | int], list[str]]:
    """A KEY.json's order (text, or an image's index) and its image members, in order."""
    segments: list[str | int] = []
    names: list[str] = []
    for text, name in zip(meta["texts"], meta["images"], strict=True):
        if text is not None:
            segments.append(text)
        else:
            segments.append(len(names))
            names.append(name)
    return segments, names


def pack_buffer(lengths: list[int], length: int, open_sequences: int) -> list[list[int]]:
    """Best-fit of one buffer into rows (the same function wdstool's plan packs with)."""
    from loaders.plan.packing import pack_sequences

    packing = pack_sequences(
        np.asarray(lengths, dtype=np.int64), length, method="best_fit", window=open_sequences,
        overflow="truncate",
    )  # fmt: skip
    return packing.indices()


def lay_row(
    samples: list[tuple[str, list[int], list[tuple[int, int]], list[torch.Tensor]]],
    length: int,
    pad: int,
    image: int,
) -> dict[str, Any]:
    """One packed row from (key, ids, runs, images) of its samples, as wdstool lays one out:
    a sample past the row's end truncated, an image whose run it cuts dropped and the part of
    its run left in the row the pad id (the image tokens are exactly the delivered runs)."""
    ids = torch.full((length,), pad, dtype=torch.int64)
    pos = torch.zeros(length, dtype=torch.int64)
    seqlens, images, spans, keys = [], [], [], []
    at = 0
    for key, sample_ids, runs, imgs in samples:
        take = min(len(sample_ids), length - at)
        ids[at : at + take] = torch.tensor(sample_ids[:take], dtype=torch.int64)
        pos[at : at + take] = torch.arange(take)
        for img, (start, n) in zip(imgs, runs, strict=True):
            if start + n <= take:
                images.append(img)
                spans.append((at + start, n))
            elif start < take:
                ids[at + start : at + take] = pad
        keys.append(key)
        seqlens.append(take)
        at += take
    return {"ids": ids, "pos": pos, "seqlens": seqlens, "images": images, "spans": spans,
            "keys": keys, "image": image, "pad": pad}  # fmt: skip


def collate_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows -> a batch with wdstool's keys."""
    length = rows[0]["ids"].shape[0]
    ids = torch.stack([r["ids"] for r in rows])
    image = rows[0]["image"]
    cu, longest, sample_row, keys = [0], 0, [], []
    image_row, spans, images = [], [], []
    for i, r in enumerate(rows):
        used = 0
        for n in r["seqlens"]:
            cu.append(cu[-1] + n)
            longest = max(longest, n)
            used += n
            sample_row.append(i)
        if used < length:
            cu.append(cu[-1] + length - used)
            longest = max(longest, length - used)
        keys += r["keys"]
        images += r["images"]
        image_row += [i] * len(r["images"])
        spans += r["spans"]
    total = sum(im.numel() for im in images)
    flat = torch.empty(total, dtype=torch.uint8)
    at = 0
    for im in images:
        flat[at : at + im.numel()].view(im.shape).copy_(im)
        at += im.numel()
    used_mask = ids != rows[0]["pad"]
    return {
        "input_ids": ids,
        "position_ids": torch.stack([r["pos"] for r in rows]),
        "loss_mask": used_mask & (ids != image),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
        "max_seqlen": longest,
        "sample_row": torch.tensor(sample_row, dtype=torch.int64),
        "keys": keys,
        "images": flat,
        "image_sizes": torch.tensor(
            [list(im.shape[1:]) for im in images], dtype=torch.int64
        ).reshape(len(images), 2),
        "image_row": torch.tensor(image_row, dtype=torch.int64),
        "image_spans": torch.tensor(spans, dtype=torch.int64).reshape(len(images), 2),
    }


# --- the pipelines -----------------------------------------------------------------------------


def wdstool_loader(args: argparse.Namespace) -> Any:
    from loaders import Interleaved, NativeResolution, Packing, TextTokenizer, make_loader

    spec = Interleaved(
        native=NativeResolution(),
        tokenizer=TextTokenizer(str(args.data / "tokenizer.json"), image_token="<image>"),
        packing=Packing(
            length=args.length,
            window=args.window,
            open_sequences=args.open_sequences,
            method="best_fit",
        ),
    )
    return make_loader(
        str(args.data / "shards"), batch_size=args.rows, output=spec, label=None,
        num_workers=args.workers, prefetch_factor=args.prefetch, cache_dir=str(args.data / "cache"),
    )  # fmt: skip


def energon_loader(args: argparse.Namespace) -> Any:
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset
    from vlm_energon import task_encoder  # beside this file (sys.path[0])

    wc = WorkerConfig(rank=0, world_size=1, num_workers=args.workers)
    encoder = task_encoder(
        Rule(str(args.data / "tokenizer.json"), args.peer_images), args.length,
        args.open_sequences,
    )  # fmt: skip
    ds = get_train_dataset(
        str(args.data / "energon"), worker_config=wc, batch_size=args.rows,
        packing_buffer_size=args.window, shuffle_buffer_size=None,
        max_samples_per_sequence=None, task_encoder=encoder, repeat=False,
    )  # fmt: skip
    return get_savable_loader(ds, prefetch_factor=args.prefetch)


class HFPacked(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """In each DataLoader worker: the worker's share of the streamed samples (``datasets``
    splits the tar files over the workers), ``window`` at a time packed best-fit into rows,
    then ``rows`` rows at a time decoded and collated into a batch."""

    def __init__(self, ds: Any, rule: Rule, args: argparse.Namespace) -> None:
        self.ds, self.rule = ds, rule
        self.length, self.rows, self.window = args.length, args.rows, args.window
        self.open_sequences = args.open_sequences

    def __iter__(self) -> Any:
        buffer: list[dict[str, Any]] = []
        for sample in self.ds:
            buffer.append(sample)
            if len(buffer) == self.window:
                yield from self._flush(buffer)
                buffer = []
        if buffer:
            yield from self._flush(buffer)

    def _flush(self, buffer: list[dict[str, Any]]) -> Any:
        rule = self.rule
        rule.tok  # noqa: B018  (built: ids of the special tokens)
        groups = pack_buffer([s["length"] for s in buffer], self.length, self.open_sequences)
        for b in range(0, len(groups), self.rows):
            rows = []
            for group in groups[b : b + self.rows]:
                members = []
                for i in group:
                    s = buffer[i]
                    imgs = [
                        rule.decode(s[f"{n}"]["bytes"], tuple(hw))
                        for n, hw in zip(s["names"], s["sizes"], strict=True)
                    ]
                    members.append((s["__key__"], s["ids"], [tuple(r) for r in s["runs"]], imgs))
                rows.append(lay_row(members, self.length, rule.pad, rule.image))
            yield collate_rows(rows)


class HFPrepare:
    """``.map``: a streamed sample -> its ids, placeholder runs, image sizes (from headers)."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        segments, names = segments_of(sample["json"])
        sizes = [self.rule.out_size(*header_size(sample[n]["bytes"])) for n in names]
        ids, runs = self.rule.encode(segments, sizes)
        return {"ids": ids, "runs": runs, "sizes": sizes, "names": names, "length": len(ids)}


def hf_loader(args: argparse.Namespace) -> Any:
    import datasets

    datasets.logging.set_verbosity_error()
    files = [str(p) for p in sorted((args.data / "shards").glob("*.tar"))]
    features = datasets.Features(
        {
            "__key__": datasets.Value("string"),
            "__url__": datasets.Value("string"),
            "json": {
                "texts": datasets.List(datasets.Value("string")),
                "images": datasets.List(datasets.Value("string")),
            },
            **{f"{i}.jpg": datasets.Image(decode=False) for i in range(MAX_IMAGES)},
        }
    )
    ds = datasets.load_dataset(
        "webdataset", data_files={"train": files}, split="train", streaming=True,
        features=features,
    )  # fmt: skip
    rule = Rule(str(args.data / "tokenizer.json"), args.peer_images)
    ds = ds.map(HFPrepare(rule))
    return torch.utils.data.DataLoader(
        HFPacked(ds, rule, args), batch_size=None, num_workers=args.workers,
        prefetch_factor=args.prefetch if args.workers else None,
    )  # fmt: skip


LOADERS = {"wdstool": wdstool_loader, "energon": energon_loader, "hf": hf_loader}


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    """One epoch of one pipeline: what it delivered and how fast."""
    pad = json.loads((args.data / "tokenizer.json").read_text())["padding"]["pad_id"]
    t0 = time.perf_counter()
    loader = LOADERS[args.pipeline](args)
    stamps: list[float] = []
    seqs: list[int] = []
    imgs: list[int] = []
    toks: list[int] = []
    tot = {"samples": 0, "tokens": 0, "loss_tokens": 0, "id_sum": 0, "images": 0, "pixels": 0,
           "rows": 0, "empty_rows": 0, "pad_tokens": 0, "pixel_sum": 0}  # fmt: skip
    keys: set[str] = set()
    dup = 0
    for batch in loader:
        if isinstance(batch, dict) and "__restore_key__" in batch:
            batch.pop("__restore_key__")
        ids = batch["input_ids"]
        used = ids != pad
        per_row = used.sum(1)
        nonempty = int((per_row > 0).sum())
        tot["rows"] += nonempty
        tot["empty_rows"] += ids.shape[0] - nonempty
        tot["pad_tokens"] += int((ids.shape[1] - per_row[per_row > 0]).sum())
        tot["samples"] += len(batch["sample_row"])
        tot["tokens"] += int(per_row.sum())
        tot["loss_tokens"] += int(batch["loss_mask"].sum())
        tot["id_sum"] += int(ids[used].sum())
        tot["images"] += len(batch["image_sizes"])
        tot["pixels"] += int(batch["images"].numel())
        if args.check:
            tot["pixel_sum"] += int(batch["images"].sum(dtype=torch.int64))
        for k in batch["keys"]:
            k = str(k).rsplit("/", 1)[-1]
            dup += k in keys
            keys.add(k)
        stamps.append(time.perf_counter())
        seqs.append(nonempty)
        imgs.append(len(batch["image_sizes"]))
        toks.append(int(per_row.sum()))
    n = len(stamps)
    wstats = loader.stats(memory=False).epoch_so_far if hasattr(loader, "stats") else None
    del loader  # its workers exit: their CPU time is the children's
    import gc
    import resource

    gc.collect()
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    k = min(args.warmup, n // 2)  # tiny epochs: time at least the second half
    start = stamps[k - 1] if k else t0
    timed = stamps[-1] - start if n else 0.0
    out = {
        "pipeline": args.pipeline,
        "batches": n,
        "first_batch_s": round(stamps[0] - t0, 3) if n else None,
        "epoch_s": round(stamps[-1] - t0, 3) if n else None,
        "timed_batches": n - k,
        "timed_s": round(timed, 3),
        "seq_per_s": round(sum(seqs[k:]) / timed, 3) if timed > 0 else None,
        "images_per_s": round(sum(imgs[k:]) / timed, 3) if timed > 0 else None,
        "tokens_per_s": round(sum(toks[k:]) / timed, 1) if timed > 0 else None,
        "padded_share": round(tot["pad_tokens"] / (tot["rows"] * args.length), 5)
        if tot["rows"]
        else None,
        **tot,
        "main_cpu_s": round(own.ru_utime + own.ru_stime, 2),
        "workers_cpu_s": round(kids.ru_utime + kids.ru_stime, 2),
        # wdstool's own account: the workers' time making batches over the time there was,
        # and the loop's wait for a batch (mean, longest)
        "workers_busy": round(wstats.workers_busy, 3) if wstats else None,
        "wait_per_batch_s": round(wstats.wait_per_batch_s, 4) if wstats else None,
        "longest_wait_s": round(wstats.longest_wait_s, 3) if wstats else None,
        "duplicate_keys": dup,
        "keys_digest": f"{sum(zlib.crc32(k.encode()) for k in keys) % (1 << 32):08x}",
        "distinct_keys": len(keys),
    }
    if not args.check:
        out.pop("pixel_sum")
    out["python"] = sys.executable
    return out


# --- the driver ------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    vers = {}
    for pkg in ("torch", "torchvision", "tokenizers", "datasets", "megatron-energon", "wdstool"):
        try:
            vers[pkg] = version(pkg)
        except Exception:
            vers[pkg] = None
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "versions": vers}  # fmt: skip


def spawn(args: argparse.Namespace, name: str, python: str) -> dict[str, Any]:
    cmd = [
        python, str(Path(__file__).resolve()), "run", name, "--data", str(args.data),
        "--length", str(args.length), "--rows", str(args.rows), "--workers", str(args.workers),
        "--window", str(args.window), "--open-sequences", str(args.open_sequences),
        "--warmup", str(args.warmup), "--prefetch", str(args.prefetch),
        "--peer-images", args.peer_images,
    ]  # fmt: skip
    if args.check:
        cmd.append("--check")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(args.data / "hf"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"pipeline": name, "error": tail[0][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


CHECKED = ("samples", "tokens", "loss_tokens", "id_sum", "images", "pixels", "keys_digest",
           "distinct_keys", "duplicate_keys")  # fmt: skip


def _stats(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def report(args: argparse.Namespace, meta: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    m = machine()
    lines = [
        "# Packed vision-language loading: wdstool, Megatron-Energon, HF datasets",
        "",
        f"`{' '.join(['python', 'bench/vlm_packing_bench.py', *sys.argv[1:]])}`",
        "",
        f"{args.samples:,} interleaved samples ({meta['images']:,} images, fewer delivered where "
        f"a truncated sample cuts one; mix {meta['kinds']}, see the script's docstring) in "
        f"{len(meta['tars'])} shards; rows of {args.length} tokens, {args.rows} rows a batch, "
        f"best-fit over buffers of {args.window} samples (at most {args.open_sequences} open "
        f"rows), {args.workers} worker{'s' if args.workers != 1 else ''} each, prefetch "
        f"{args.prefetch}; peers' images decoded by {args.peer_images}. {args.rounds} timed "
        f"rounds after one warm round, pipelines interleaved; figures after {args.warmup} "
        "warm-up batches of each epoch.",
        "",
        f"Machine: {m['cores']} cores, {m['cpu']}; Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v),
        "",
        "| pipeline | sequences/s min / median / max | images/s median | tokens/s median | "
        "padded share | first batch s | wdstool ÷ peer (medians: sequences/s, tokens/s) |",
        "|---|---|---|---|---|---|---|",
    ]
    timed = [r for r in runs if r.get("round", 0) > 0 and "error" not in r]
    med: dict[str, tuple[float, float]] = {}
    for name in args.pipelines:
        mine = [r for r in timed if r["pipeline"] == name and r.get("seq_per_s")]
        if not mine:
            err = next((r["error"] for r in runs if r["pipeline"] == name and "error" in r), "")
            lines.append(f"| {TITLES[name]} | {err or 'no run'} | | | | | |")
            continue
        lo, mid, hi = _stats([r["seq_per_s"] for r in mine])
        tps = statistics.median([r["tokens_per_s"] for r in mine])
        med[name] = (mid, tps)
        ims = statistics.median([r["images_per_s"] for r in mine])
        pad = statistics.median([r["padded_share"] for r in mine])
        first = statistics.median([r["first_batch_s"] for r in mine])
        ratio = ""
        if name != "wdstool" and "wdstool" in med:
            ours = med["wdstool"]
            ratio = f"**{ours[0] / mid:.2f}**, {ours[1] / tps:.2f}"
        lines.append(
            f"| {TITLES[name]} | {lo:,.1f} / {mid:,.1f} / {hi:,.1f} | {ims:,.1f} | {tps:,.0f} | "
            f"{pad:.2%} | {first:.2f} | {ratio} |"
        )
    lines += ["", "Delivered in one epoch (each pipeline's last run; must agree):", ""]
    lines += ["| pipeline | batches | rows | empty rows | " + " | ".join(CHECKED) + " |"]
    lines += ["|---" * (4 + len(CHECKED)) + "|"]
    last = {r["pipeline"]: r for r in runs if "error" not in r}
    for name in args.pipelines:
        r = last.get(name)
        if r is None:
            continue
        lines.append(
            f"| {name} | {r['batches']} | {r['rows']} | {r['empty_rows']} | "
            + " | ".join(str(r[c]) for c in CHECKED)
            + " |"
        )
    agree = len({tuple(r[c] for c in CHECKED) for r in runs if "error" not in r}) <= 1
    lines += [
        "",
        f"Same samples, tokens and images in every run of every pipeline: {'yes' if agree else 'NO'}",
    ]
    if args.check:
        sums = {n: r.get("pixel_sum") for n, r in last.items()}
        lines.append(f"Pixel sums (--check): {sums}")
    prep = meta.get("energon_prepare_s")
    lines.append(
        f"Preparation (untimed): generate + `wdstool pack` {meta['generate_and_pack_s']} s"
        + (f", `energon prepare` {prep} s" if prep else "")
        + "; wdstool's token lengths are computed by its first loader (the warm round) and "
        "kept in DATA/cache."
    )
    others = {r["pipeline"]: r["python"] for r in last.values() if r.get("python")}
    if len(set(others.values())) > 1:
        lines.append("Interpreters: " + ", ".join(f"{n} {py}" for n, py in others.items()))
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "action", nargs="?", default="bench", choices=["bench", "run", "grid", "grid-report"]
    )
    p.add_argument("pipeline", nargs="?", choices=PIPELINES)
    p.add_argument("--data", type=Path, default=REPO / "bench" / "data" / "vlm")
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pool", type=int, default=24, help="distinct JPEGs per nominal size")
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--length", type=int, default=4096, help="tokens a row (L)")
    p.add_argument("--rows", type=int, default=4, help="rows a batch (B)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--window", type=int, default=1024, help="samples packed together")
    p.add_argument("--open-sequences", type=int, default=64)
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5, help="batches of each epoch not timed")
    p.add_argument("--pipelines", default=",".join(PIPELINES))
    p.add_argument(
        "--peer-images",
        choices=["torchvision", "wdstool"],
        default="torchvision",
        help="how the peers decode and resize: torchvision's decode_image + resize (default), "
        "or wdstool's NativeResolution (the same call as wdstool: only the pipelines differ)",
    )
    p.add_argument(
        "--energon-python",
        default=None,
        help="the interpreter of the energon runs (default: .venv-peers' if it has "
        "megatron-energon, else this one)",
    )
    p.add_argument("--grid-samples", default="400,800,2000,8000", help="grid: samples a rank")
    p.add_argument("--grid-workers", default="2,4", help="grid: workers")
    p.add_argument("--check", action="store_true", help="also sum every pixel (slower)")
    p.add_argument("--out", type=Path, default=None, help="the report (Markdown), + .json")
    args = p.parse_args(argv)
    args.pipelines = [x for x in args.pipelines.split(",") if x]
    return args


def grid(args: argparse.Namespace) -> None:
    """``grid``: wdstool against each peer at every ``--grid-samples`` (samples a rank: the
    data set, one rank) x ``--grid-workers``, each data set in ``DATA-ROOT/vlm-N``, rounds
    interleaved per data set; one table (issue 58: a rank's share of a window or two)."""
    runs: list[dict[str, Any]] = []
    metas: dict[int, dict[str, Any]] = {}
    root = args.data
    for n in [int(x) for x in args.grid_samples.split(",")]:
        args.data, args.samples = root / f"vlm-{n}", n
        meta = metas[n] = prepare(args.data, n, args.seed, args.pool, args.shards)
        pythons = dict.fromkeys(args.pipelines, sys.executable)
        if "energon" in args.pipelines:
            py, why = energon_python(args.energon_python)
            if py is None:
                raise SystemExit(f"energon: {why}")
            pythons["energon"] = py
            energon_folder(args.data, meta, py)
        for rnd in range(args.rounds + 1):
            for w in [int(x) for x in args.grid_workers.split(",")]:
                args.workers = w
                for name in args.pipelines:
                    r = spawn(args, name, pythons[name])
                    r.update(round=rnd, grid_samples=n, grid_workers=w)
                    runs.append(r)
                    print(json.dumps({k: r.get(k) for k in ("pipeline", "grid_samples",
                          "grid_workers", "round", "seq_per_s", "tokens_per_s", "epoch_s",
                          "first_batch_s", "workers_busy", "error")}), flush=True)  # fmt: skip
    args.data = root
    text = grid_report(args, metas, runs)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(
            json.dumps({"argv": sys.argv[1:], "runs": runs}, indent=1)
        )


def grid_report(args: argparse.Namespace, metas: dict[int, Any], runs: list[dict[str, Any]]) -> str:
    m = machine()
    peers = [p for p in args.pipelines if p != "wdstool"]
    lines = [
        "# Packed vision-language loading: wdstool against Megatron-Energon, by samples a rank",
        "",
        f"`{' '.join(['python', 'bench/vlm_packing_bench.py', *sys.argv[1:]])}`",
        "",
        f"The data sets of the script's docstring at each size (one rank: its share is the data "
        f"set); rows of {args.length} tokens, {args.rows} rows a batch, best-fit over windows "
        f"of {args.window} samples (Energon: its packing buffer), at most {args.open_sequences} "
        f"open rows, prefetch {args.prefetch}; {args.rounds} timed rounds after a warm one, "
        f"pipelines interleaved; sequences/s after {args.warmup} warm-up batches, medians. "
        "`workers busy`: wdstool's `stats()` (the workers' time making batches over the "
        "workers' time there was), `wait`: its mean wait for a batch after the first.",
        "",
        f"Machine: {m['cores']} cores, {m['cpu']}; Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v),
        "",
        "| samples a rank | workers | windows | wdstool seq/s | "
        + " | ".join(
            f"{p} seq/s | ÷ {p} (seq/s, tokens/s) | epoch s (wdstool / {p}) | ÷ {p} (epoch) | "
            f"first batch s (wdstool / {p})"
            for p in peers
        )
        + " | workers busy | wait per batch |",
        "|---:|---:|---:|---:|" + "---:|---|---|---|---|" * len(peers) + "---:|---:|",
    ]
    timed = [r for r in runs if r.get("round", 0) > 0 and "error" not in r]

    def med(n: int, w: int, name: str, key: str) -> float | None:
        vals = [r[key] for r in timed if (r["grid_samples"], r["grid_workers"], r["pipeline"])
                == (n, w, name) and r.get(key) is not None]  # fmt: skip
        return statistics.median(vals) if vals else None

    for n in metas:
        for w in sorted({r["grid_workers"] for r in runs}):
            ours = med(n, w, "wdstool", "seq_per_s")
            cells = [f"{n:,}", str(w), str(-(-n // args.window)), f"{ours or 0:,.1f}"]
            for p in peers:
                theirs = med(n, w, p, "seq_per_s")
                tk = (med(n, w, "wdstool", "tokens_per_s") or 0) / (
                    med(n, w, p, "tokens_per_s") or 1
                )
                e_ours, e_theirs = med(n, w, "wdstool", "epoch_s"), med(n, w, p, "epoch_s")
                f_ours, f_theirs = (
                    med(n, w, "wdstool", "first_batch_s"),
                    med(n, w, p, "first_batch_s"),
                )
                cells += [
                    f"{theirs or 0:,.1f}",
                    f"**{(ours or 0) / (theirs or 1):.2f}**, {tk:.2f}",
                    f"{e_ours or 0:.1f} / {e_theirs or 0:.1f}",
                    f"{(e_theirs or 0) / (e_ours or 1):.2f}",
                    f"{f_ours or 0:.2f} / {f_theirs or 0:.2f}",
                ]
            busy = med(n, w, "wdstool", "workers_busy")
            wait = med(n, w, "wdstool", "wait_per_batch_s")
            cells += [f"{busy or 0:.0%}", f"{(wait or 0) * 1e3:.0f} ms"]
            lines.append("| " + " | ".join(cells) + " |")
    agree = all(
        len(
            {
                tuple(r[c] for c in CHECKED)
                for r in runs
                if r.get("grid_samples") == n and "error" not in r
            }
        )
        <= 1
        for n in metas
    )
    lines += ["", f"Same samples, tokens and images in every run of every pipeline, per size: "
              f"{'yes' if agree else 'NO'}"]  # fmt: skip
    errors = [r for r in runs if "error" in r]
    if errors:
        lines.append(f"Failed runs: {len(errors)} (first: {errors[0]['error']})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.action == "run":
        if args.pipeline is None:
            raise SystemExit("run NAME: one of " + ", ".join(PIPELINES))
        print(json.dumps(run_one(args)), flush=True)
        return
    if args.action == "grid":
        grid(args)
        return
    if args.action == "grid-report":  # the report again, from a grid's JSON (--out's)
        assert args.out is not None
        saved = json.loads(args.out.with_suffix(".json").read_text())
        sizes = sorted({r["grid_samples"] for r in saved["runs"]})
        text = grid_report(args, dict.fromkeys(sizes), saved["runs"])
        args.out.write_text(text)
        print(text)
        return
    t = time.perf_counter()
    meta = prepare(args.data, args.samples, args.seed, args.pool, args.shards)
    print(f"data: {args.data} ({args.samples} samples, {meta['images']} images) "
          f"ready in {time.perf_counter() - t:.1f} s", flush=True)  # fmt: skip
    pythons = dict.fromkeys(args.pipelines, sys.executable)
    skipped: dict[str, str] = {}
    if "energon" in args.pipelines:
        py, why = energon_python(args.energon_python)
        if py is None:
            skipped["energon"] = why
        else:
            pythons["energon"] = py
            took = energon_folder(args.data, meta, py)
            if took:  # kept with the data set's facts
                meta["energon_prepare_s"] = took
                (args.data / "spec.json").write_text(json.dumps(meta, indent=1))
    runs = [{"pipeline": n, "round": 0, "error": f"skipped: {w}"} for n, w in skipped.items()]
    for n, w in skipped.items():
        print(f"{n}: skipped: {w}", flush=True)
    for rnd in range(args.rounds + 1):
        for name in args.pipelines:
            if name in skipped:
                continue
            r = spawn(args, name, pythons[name])
            r["round"] = rnd
            if "error" in r:
                r["error"] = f"failed: {r['error']}"
            runs.append(r)
            what = r.get("error") or (
                f"{r['seq_per_s']} seq/s, {r['images_per_s']} images/s, padded "
                f"{r['padded_share']}, {r['samples']} samples, {r['tokens']} tokens, "
                f"{r['images']} images"
            )
            print(f"round {rnd}{' (warm)' if rnd == 0 else ''} {name}: {what}", flush=True)
    text = report(args, meta, runs)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(
            json.dumps({"argv": sys.argv[1:], "meta": meta, "runs": runs}, indent=1)
        )


if __name__ == "__main__":
    main()
