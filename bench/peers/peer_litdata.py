"""Lightning's litdata on its own chunked format, converted once from DATA/images (prepare,
cached in DATA/peers/litdata/): ``litdata.optimize`` over ImageFolder's file list with samples
``{"image": PIL.Image.open(path), "label": int}``; litdata's JPEG serializer stores the files'
own bytes (no re-encoding), 64 MB chunks. Read with ``StreamingDataset(shuffle=True)``
(its JPEG deserializer decodes with ``torchvision.io.decode_jpeg``) + ``transform=``
the recipe's torchvision v2 ops on the uint8 tensor (default: RandomResizedCrop(antialias) +
flip; ``--recipe full``: _common.recipe_ops), through
``StreamingDataLoader(num_workers=workers, prefetch_factor)``: litdata's own ImageNet
streaming benchmark (benchmarks/litdata/stream_imagenet.py) less its float conversion."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import (
    V2_OPS,
    Batch,
    Skip,
    cached,
    image_files,
    main,
    mark_cached,
    tensor_augment,
)


def out_dir(args: argparse.Namespace) -> Path:
    return (args.data / "peers" / "litdata").resolve()


def check(args: argparse.Namespace) -> None:
    try:
        import litdata  # noqa: F401
        import torchvision.transforms.v2  # noqa: F401
    except ImportError as e:
        raise Skip(f"litdata not importable: {e}") from e


def _sample(item: tuple[str, int]) -> dict[str, Any]:
    from PIL import Image

    path, label = item
    return {"image": Image.open(path), "label": label}


def prepare(args: argparse.Namespace) -> None:
    import litdata

    out = out_dir(args)
    if cached(out, args.data):
        return
    shutil.rmtree(out, ignore_errors=True)
    files, labels = image_files(args.data)
    litdata.optimize(
        fn=_sample,
        inputs=list(zip(files, labels, strict=True)),
        output_dir=str(out),
        chunk_bytes="64MB",
        num_workers=max(1, args.workers),
        mode="overwrite",
    )
    mark_cached(out, args.data)


class _Augment:
    """Picklable: the sample dict -> (uint8 image, label)."""

    def __init__(self, size: int, recipe: str) -> None:
        self.size = size
        self.recipe = recipe
        self.tf: Any = None

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        if self.tf is None:
            self.tf = tensor_augment(self.size, self.recipe)
        return self.tf(sample["image"]), sample["label"]


def build(args: argparse.Namespace) -> Iterator[Batch]:
    from litdata import StreamingDataLoader, StreamingDataset

    if not cached(out_dir(args), args.data):
        raise SystemExit(f"litdata: {out_dir(args)} not prepared; run the prepare step first")
    augment = _Augment(args.image_size, args.recipe)
    ds = StreamingDataset(str(out_dir(args)), shuffle=True, seed=args.seed, transform=augment)
    kwargs = {"prefetch_factor": args.prefetch_factor} if args.workers else {}
    loader = StreamingDataLoader(ds, batch_size=args.batch_size, num_workers=args.workers, **kwargs)
    yield from loader


def config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "reads": "litdata chunks (the JPEG bytes, 64 MB chunks)",
        "loader": f"StreamingDataset(shuffle=True, transform={V2_OPS[args.recipe]}) + "
        f"StreamingDataLoader(num_workers={args.workers}, "
        f"prefetch_factor={args.prefetch_factor})",
    }


def _expected(args: argparse.Namespace) -> int:
    return len(image_files(args.data)[0])  # made from DATA/images: one sample per JPEG


if __name__ == "__main__":
    main("litdata", build=build, config=config, check=check, prepare=prepare, expected=_expected)
