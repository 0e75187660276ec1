"""NVIDIA DALI's CPU pipeline on DATA/shards (no GPU: ``device_id=None``, every op on the CPU).

``fn.readers.webdataset`` with the index files ``wdstool index DATA/shards --dali`` writes
(prepare; cached in DATA/peers/dali/), shuffled (``random_shuffle=True``, DALI's default
``initial_fill=1024`` buffer); ``fn.decoders.image_random_crop`` (RandomResizedCrop's area
0.08-1 and ratio 3/4-4/3; the CPU decoder decodes only the crop's region of interest, through
libjpeg-turbo); ``fn.resize`` to SxS (linear, antialiased); ``fn.crop_mirror_normalize`` with
``mirror=fn.random.coin_flip()``, ``dtype=UINT8``, ``output_layout="CHW"`` (the flip and the
HWC->CHW transpose in one pass, no normalization); ``num_threads`` = workers; batches through
``DALIGenericIterator`` (``LastBatchPolicy.PARTIAL``: exactly one epoch).

``--recipe full``, DALI's closest ops (``_full``): the same region decode; ``fn.resize``
(``INTERP_CUBIC``, antialiased); ``fn.flip(horizontal=coin_flip)``;
``nvidia.dali.auto_aug.trivial_augment.trivial_augment_wide`` (31 bins, translations up to 32
px, as torchvision's; ``fill_value=0`` and ``INTERP_NN`` as torchvision's defaults, DALI's
being 128 and linear); RandomErasing(p=0.25) as ``fn.erase`` under a coin flip (conditionals
enabled), the rectangle drawn as torchvision draws it (area 0.02-0.33, log-uniform ratio
0.3-3.3, anchor uniform, zeros) except that a side longer than the image is clamped to it
instead of redrawn (torchvision's 10 tries); ``fn.transpose`` to CHW."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import Batch, Skip, cached, main, mark_cached, shard_paths


def index_dir(args: argparse.Namespace) -> Path:
    return args.data / "peers" / "dali"


def check(args: argparse.Namespace) -> None:
    try:
        import nvidia.dali
        import nvidia.dali.plugin.pytorch  # noqa: F401
    except ImportError as e:
        raise Skip(f"DALI not importable: {e}") from e


def prepare(args: argparse.Namespace) -> None:
    out = index_dir(args)
    if cached(out, args.data):
        return
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "wdstool", "index", str(args.data / "shards"), "--dali"]
    subprocess.run([*cmd, "--out", str(out), "-q"], check=True)
    mark_cached(out, args.data)


def build(args: argparse.Namespace) -> Iterator[Batch]:
    import torch
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    tars = shard_paths(args.data)
    idx = [str(index_dir(args) / (Path(t).stem + ".idx")) for t in tars]
    missing = [i for i in idx if not Path(i).is_file()]
    if missing:
        raise SystemExit(f"dali: {missing[0]} missing; run the prepare step first")
    size = args.image_size

    @pipeline_def(
        batch_size=args.batch_size,
        num_threads=args.workers,
        device_id=None,
        seed=args.seed + 1,
        enable_conditionals=args.recipe == "full",  # the erase's coin flip, TrivialAugment's choice
    )
    def pipe():  # type: ignore[no-untyped-def]
        jpegs, cls = fn.readers.webdataset(
            paths=tars,
            index_paths=idx,
            ext=["jpg", "cls"],
            random_shuffle=True,
            missing_component_behavior="error",
            name="reader",
        )
        images = fn.decoders.image_random_crop(
            jpegs,
            device="cpu",
            output_type=types.RGB,
            random_area=[0.08, 1.0],
            random_aspect_ratio=[3 / 4, 4 / 3],
            num_attempts=10,
        )
        if args.recipe == "full":
            images = _full(images, size)
        else:
            images = fn.resize(images, resize_x=size, resize_y=size, antialias=True)
            images = fn.crop_mirror_normalize(
                images,
                dtype=types.UINT8,
                output_layout="CHW",
                mirror=fn.random.coin_flip(probability=0.5),
            )
        # the label is the .cls member's ASCII digits: padded to a fixed width for batching
        return images, fn.pad(cls, fill_value=32, shape=[8])

    p = pipe()
    p.build()
    it = DALIGenericIterator(
        p,
        ["images", "cls"],
        reader_name="reader",
        last_batch_policy=LastBatchPolicy.PARTIAL,
        auto_reset=False,
    )
    for out in it:
        images, cls = out[0]["images"], out[0]["cls"]
        labels = torch.tensor([int(bytes(row.tolist()).strip()) for row in cls])
        yield images, labels


def _full(images: Any, size: int) -> Any:
    """The full recipe after the region decode, in DALI's closest ops (HWC in, CHW out)."""
    from nvidia.dali import fn, types
    from nvidia.dali.auto_aug.trivial_augment import trivial_augment_wide

    images = fn.resize(
        images, resize_x=size, resize_y=size, antialias=True, interp_type=types.INTERP_CUBIC
    )
    images = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
    images = trivial_augment_wide(images, fill_value=0, interp_type=types.INTERP_NN)
    if fn.random.coin_flip(probability=0.25):
        images = _erase(images)
    return fn.transpose(images, perm=[2, 0, 1])


def _erase(images: Any) -> Any:
    """torchvision's RandomErasing rectangle (scale 0.02-0.33 of the area, log-uniform aspect
    ratio 0.3-3.3, uniform position, zeros), in fractions of the (square) image."""
    from nvidia.dali import fn
    from nvidia.dali import math as dmath

    area = fn.random.uniform(range=[0.02, 0.33], shape=[1])
    ratio = dmath.exp(fn.random.uniform(range=[math.log(0.3), math.log(3.3)], shape=[1]))
    shape = fn.cat(
        dmath.min(dmath.sqrt(area * ratio), 1.0), dmath.min(dmath.sqrt(area / ratio), 1.0)
    )
    anchor = fn.random.uniform(range=[0.0, 1.0], shape=[2]) * (1.0 - shape)
    return fn.erase(
        images, anchor=anchor, shape=shape, normalized=True, axis_names="HW", fill_value=0
    )


def config(args: argparse.Namespace) -> dict[str, Any]:
    head = "readers.webdataset(random_shuffle=True) -> decoders.image_random_crop -> "
    tail = f"device='cpu', num_threads={args.workers}, DALIGenericIterator"
    if args.recipe == "full":
        return {
            "reads": "shards (tar) + DALI index files",
            "loader": f"{head}resize(INTERP_CUBIC, antialias) -> flip(coin_flip) -> "
            "auto_aug.trivial_augment_wide(31 bins, fill_value=0, INTERP_NN) -> "
            "if coin_flip(0.25): erase(torchvision's rectangle, sides clamped to the image, "
            f"zeros) -> transpose(CHW), enable_conditionals=True, {tail}",
        }
    return {
        "reads": "shards (tar) + DALI index files",
        "loader": f"{head}resize(antialias) -> crop_mirror_normalize(UINT8, CHW, coin_flip), {tail}",
    }


if __name__ == "__main__":
    main("dali", build=build, config=config, check=check, prepare=prepare)
