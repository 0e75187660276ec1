"""Batches of every kind of output, saved once and compared bit for bit ever after.

The inputs are committed tar shards (``data/images-*.tar``: JPEGs of several sizes with labels,
captions and JSON; ``data/videos-000000.tar``: four small MPEG-4 videos), so that neither an
encoder's nondeterminism nor a change in a generator can move them. Each case makes a loader
the way a user does and takes every batch of one or two epochs; the tensors go to
``data/batches.npz`` (numpy arrays, loaded with ``allow_pickle=False``) and everything else
(keys, captions, the batch's key set) to ``data/batches.json``.

``python -m tests.loaders.kinds.golden --write`` saves them from the code as it is (done before
the output kinds moved into modules of their own: their batches must not change).
"""

from __future__ import annotations

import io
import json
import random
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

DATA = Path(__file__).parent / "data"
IMAGES = "images-{000000..000001}.tar"
VIDEOS = "videos-000000.tar"
BAD = "bad-000000.tar"  # two of its four samples are damaged (on_error="skip" replaces them)


def _jpeg(seed: int, w: int, h: int) -> bytes:
    from PIL import Image

    rng = random.Random(seed)
    base = Image.new("RGB", (w, h), tuple(rng.randrange(256) for _ in range(3)))
    noise = Image.effect_noise((w, h), 40).convert("RGB")
    img = Image.blend(base, noise, 0.5)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=88)
    return buf.getvalue()


def _tar(path: Path, samples: list[tuple[str, dict[str, bytes]]]) -> None:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, members in samples:
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))


def write_inputs() -> None:
    """The committed shards (run once; kept as they are)."""
    DATA.mkdir(parents=True, exist_ok=True)
    sizes = [(64, 48), (40, 72), (96, 96), (57, 33), (120, 80), (48, 64)]
    for s in range(2):
        samples = []
        for i in range(7 if s == 0 else 6):
            n = s * 7 + i
            w, h = sizes[n % len(sizes)]
            words = " ".join(["cat", "dog", "bird", "fish"][: 1 + n % 4])
            samples.append(
                (
                    f"img{n:04d}",
                    {
                        "jpg": _jpeg(n, w, h),
                        "cls": b"%d" % (n % 3),
                        "txt": f"a photo of {words}".encode(),
                        "json": json.dumps({"score": n / 10, "n": n}).encode(),
                    },
                )
            )
        _tar(DATA / f"images-{s:06d}.tar", samples)
    from shard_writer.sample_videos import VideoSettings, encode_video
    from tests.support.videos import write_shards

    good = _jpeg(99, 50, 40)
    bad = [
        ("bad0000", {"jpg": good, "cls": b"1", "txt": b"a good one", "json": b'{"score": 1}'}),
        (
            "bad0001",
            {"jpg": good[: len(good) // 3], "cls": b"2", "txt": b"cut short", "json": b"{}"},
        ),
        ("bad0002", {"jpg": b"not an image", "cls": b"0", "txt": b"no image", "json": b"{}"}),
        ("bad0003", {"jpg": _jpeg(98, 30, 60), "cls": b"1", "txt": b"fine", "json": b"{}"}),
    ]
    _tar(DATA / "bad-000000.tar", bad)
    small = VideoSettings(width=64, height=48, fps=12, gop=6, crf=30)
    videos = [encode_video(12 + 4 * i, small, seed=0, i=i) for i in range(4)]
    write_shards(DATA, videos, per_shard=4, prefix="videos")


def _tokens(values: dict[str, Any]) -> dict[str, Any]:
    """A caption as a variable-length tensor of its word lengths (for pad_fields)."""
    return {"tokens": torch.tensor([len(w) for w in values["txt"].split()], dtype=torch.int64)}


def _cases() -> dict[str, Callable[[], Any]]:
    from torchvision.transforms import v2

    from loaders import Clips, Source, make_loader

    images, videos = str(DATA / IMAGES), str(DATA / VIDEOS)
    base = dict(batch_size=4, seed=3, rank=0, world_size=1, stats=False)
    thread = dict(num_workers=2, worker_mode="thread")
    crop = v2.Compose([v2.RandomResizedCrop(24, antialias=True), v2.RandomHorizontalFlip()])
    small = v2.Compose([v2.RandomResizedCrop(16, antialias=True), v2.RandomHorizontalFlip()])
    floats = v2.Compose(
        [
            v2.RandomResizedCrop(20, antialias=True),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]),
        ]
    )
    return {
        "image": lambda: make_loader(
            images, image_size=32, fields={"txt": "txt"}, **base, **thread
        ),
        "image_processes": lambda: make_loader(
            images, transform=crop, num_workers=2, persistent_workers=False, **base
        ),
        "image_eval_mask": lambda: make_loader(
            images,
            image_size=(24, 28),
            train=False,
            uneven="mask",
            batch_size=5,
            **{k: v for k, v in base.items() if k != "batch_size"},
        ),
        "image_float_channels_last": lambda: make_loader(
            images, transform=floats, channels_last=True, **base, **thread
        ),
        "image_mixture_fields": lambda: make_loader(
            [Source(images, weight=1.0), Source(str(DATA / BAD), weight=0.5)],
            image_size=16,
            epoch_size=20,
            fields={"txt": "txt", "score": "json:score"},
            fields_fn=_tokens_fn,
            pad_fields={"tokens": 0},
            on_error="skip",
            max_replaced=None,
            **base,
            **thread,
        ),
        "views": lambda: make_loader(images, views=[(crop, 2), (small, 1)], **base, **thread),
        "clips": lambda: make_loader(
            videos, clips=Clips(frames=4, stride=2), image_size=24, **base, **thread
        ),
        "clips_cthw_eval": lambda: make_loader(
            videos,
            clips=Clips(frames=3, clips_per_video=2, layout="CTHW"),
            image_size=16,
            train=False,
            **base,
        ),
        "encoded": lambda: make_loader(images, output="encoded", image_size=32, **base, **thread),
    }


CASES = (
    "image",
    "image_processes",
    "image_eval_mask",
    "image_float_channels_last",
    "image_mixture_fields",
    "views",
    "clips",
    "clips_cthw_eval",
    "encoded",
)  # the names of _cases(), without importing torchvision at collection


def _tokens_fn(values: dict[str, Any]) -> dict[str, Any]:
    return {**_tokens(values), "score": values["score"]}


EPOCHS = {"image": 2, "views": 2}  # cases run for two epochs (the rest: one)


def batches(case: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(a name per batch, the batch) of every epoch of ``case``."""
    loader = _cases()[case]()
    for epoch in range(EPOCHS.get(case, 1)):
        loader.set_epoch(epoch)
        for i, batch in enumerate(loader):
            yield f"{case}/{epoch}/{i}", batch


def flatten(name: str, batch: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A batch as arrays (its tensors, views numbered) and JSON (the rest, and its keys)."""
    arrays: dict[str, np.ndarray] = {}
    rest: dict[str, Any] = {f"{name}/__keys__": sorted(batch)}
    for key, value in batch.items():
        values = value if key == "views" else [value]
        if isinstance(value, list) and key != "views":
            values = [value]
        for v, item in enumerate(values):
            tag = f"{name}/{key}" + (f"/{v}" if key == "views" else "")
            if isinstance(item, torch.Tensor):
                arrays[tag] = item.contiguous().numpy()
                arrays[tag + "/stride"] = np.asarray(item.stride(), dtype=np.int64)
            else:
                rest[tag] = item
    return arrays, rest


def write() -> None:
    arrays: dict[str, np.ndarray] = {}
    rest: dict[str, Any] = {}
    for case in _cases():
        for name, batch in batches(case):
            a, r = flatten(name, batch)
            arrays.update(a)
            rest.update(r)
    np.savez_compressed(DATA / "batches.npz", **arrays)
    (DATA / "batches.json").write_text(json.dumps(rest, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    if "--inputs" in sys.argv:
        write_inputs()
    if "--write" in sys.argv:
        write()
