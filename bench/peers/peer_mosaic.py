"""MosaicML streaming on its MDS format, converted once from DATA/images (prepare, cached in
DATA/peers/mds/): ``MDSWriter(columns={"image": "bytes", "label": "int"})`` with each file's
own JPEG bytes (the ``jpeg`` column type would hand back a PIL image: decoding with
``torchvision.io.decode_jpeg`` instead is faster here, see _common.decode_jpeg), 64 MB shards.
Read with ``StreamingDataset(local=..., shuffle=True, batch_size=B)`` (its default ``py1e``
shuffle), subclassed as in streaming's own vision datasets to decode and augment in
``__getitem__`` (the recipe's v2 ops on the uint8 tensor: default RandomResizedCrop(antialias)
+ flip; ``--recipe full``: _common.recipe_ops), through a
``torch.utils.data.DataLoader(num_workers=workers, prefetch_factor)``."""

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
    decode_jpeg,
    image_files,
    main,
    mark_cached,
    tensor_augment,
)


def out_dir(args: argparse.Namespace) -> Path:
    return (args.data / "peers" / "mds").resolve()


def check(args: argparse.Namespace) -> None:
    try:
        import streaming  # noqa: F401
        import torchvision.transforms.v2  # noqa: F401
    except ImportError as e:
        raise Skip(f"mosaicml-streaming not importable: {e}") from e


def prepare(args: argparse.Namespace) -> None:
    from streaming import MDSWriter

    out = out_dir(args)
    if cached(out, args.data):
        return
    shutil.rmtree(out, ignore_errors=True)
    files, labels = image_files(args.data)
    columns = {"image": "bytes", "label": "int"}
    with MDSWriter(out=str(out), columns=columns, size_limit="64mb") as w:
        for path, label in zip(files, labels, strict=True):
            w.write({"image": Path(path).read_bytes(), "label": label})
    mark_cached(out, args.data)


def _dataset_class() -> Any:
    from streaming import StreamingDataset

    class Augmented(StreamingDataset):  # type: ignore[misc, valid-type]
        def __init__(self, *, image_size: int, recipe: str, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.image_size = image_size
            self.recipe = recipe
            self.tf: Any = None

        def __getitem__(self, index: int) -> tuple[Any, int]:
            sample = super().__getitem__(index)
            if self.tf is None:
                self.tf = tensor_augment(self.image_size, self.recipe)
            return self.tf(decode_jpeg(sample["image"])), sample["label"]

    return Augmented


def build(args: argparse.Namespace) -> Iterator[Batch]:
    import torch
    from streaming.base.util import clean_stale_shared_memory

    if not cached(out_dir(args), args.data):
        raise SystemExit(f"mosaic: {out_dir(args)} not prepared; run the prepare step first")
    clean_stale_shared_memory()
    ds = _dataset_class()(
        image_size=args.image_size,
        recipe=args.recipe,
        local=str(out_dir(args)),
        shuffle=True,
        shuffle_seed=args.seed,
        batch_size=args.batch_size,
    )
    kwargs = {"prefetch_factor": args.prefetch_factor} if args.workers else {}
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch_size, num_workers=args.workers, **kwargs
    )
    yield from loader


def config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "reads": "MDS shards (the JPEG bytes, 64 MB shards)",
        "loader": f"StreamingDataset(local, shuffle=True, py1e) + decode_jpeg + "
        f"{V2_OPS[args.recipe]} in __getitem__, DataLoader(num_workers={args.workers}, "
        f"prefetch_factor={args.prefetch_factor})",
    }


def _expected(args: argparse.Namespace) -> int:
    return len(image_files(args.data)[0])  # made from DATA/images: one sample per JPEG


if __name__ == "__main__":
    main("mosaic", build=build, config=config, check=check, prepare=prepare, expected=_expected)
