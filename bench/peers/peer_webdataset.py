"""Upstream webdataset on DATA/shards: ``wds.WebDataset(shards, shardshuffle=len(shards),
nodesplitter=wds.split_by_node).shuffle(2000)`` (the same 2,000-sample buffer of compressed
samples as wdstool's loader), ``.to_tuple("jpg", "cls")``, ``.map_tuple(decode + augment,
int)`` with ``torchvision.io.decode_jpeg`` (faster here than ``.decode("pil")``, see
_common.decode_jpeg) and the recipe's torchvision v2 ops on the uint8 tensor (default:
RandomResizedCrop(antialias) + flip; ``--recipe full``: _common.recipe_ops),
``.batched(B, partial=True)`` in the workers, ``wds.WebLoader(batch_size=None,
num_workers=workers, prefetch_factor)``. (`make bench` has the PIL variant.)"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from _common import V2_OPS, Batch, Skip, decode_jpeg, main, shard_paths, tensor_augment


def check(args: argparse.Namespace) -> None:
    try:
        import torchvision.transforms.v2  # noqa: F401
        import webdataset  # noqa: F401
    except ImportError as e:
        raise Skip(f"webdataset not importable: {e}") from e


class _Augment:
    """Picklable: JPEG bytes -> augmented uint8 CHW tensor."""

    def __init__(self, size: int, recipe: str) -> None:
        self.size = size
        self.recipe = recipe
        self.tf: Any = None

    def __call__(self, data: bytes) -> Any:
        if self.tf is None:
            self.tf = tensor_augment(self.size, self.recipe)
        return self.tf(decode_jpeg(data))


def build(args: argparse.Namespace) -> Iterator[Batch]:
    import torch
    import webdataset as wds

    torch.manual_seed(args.seed)
    ds = (
        wds.WebDataset(
            shard_paths(args.data),
            shardshuffle=len(shard_paths(args.data)),
            nodesplitter=wds.split_by_node,
            empty_check=False,
            seed=args.seed,
        )
        .shuffle(2000)
        .to_tuple("jpg", "cls")
        .map_tuple(_Augment(args.image_size, args.recipe), int)
        .batched(args.batch_size, partial=True)
    )
    kwargs = {"prefetch_factor": args.prefetch_factor} if args.workers else {}
    loader = wds.WebLoader(ds, batch_size=None, num_workers=args.workers, **kwargs)
    yield from loader


def config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "reads": "shards (tar)",
        "loader": f"WebDataset(shardshuffle=<shards>).shuffle(2000).to_tuple('jpg','cls')"
        f".map_tuple(decode_jpeg + {V2_OPS[args.recipe]}, int).batched({args.batch_size}) + "
        f"WebLoader(num_workers={args.workers}, prefetch_factor={args.prefetch_factor})",
    }


if __name__ == "__main__":
    main("webdataset", build=build, config=config, check=check)
