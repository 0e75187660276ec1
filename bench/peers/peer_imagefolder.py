"""torchvision ``ImageFolder`` on DATA/images with its default PIL loader: what most training
scripts do, the classic reference (PIL on purpose; not tuned). v2 RandomResizedCrop
(antialiased, on the PIL image) + flip + ``PILToTensor`` (uint8); ``--recipe full``: the crop
bicubic + flip + TrivialAugmentWide on the PIL image, ``PILToTensor``, RandomErasing(0.25) on
the tensor (torchvision's reference order); ``DataLoader(shuffle=True, num_workers=workers,
prefetch_factor)``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from _common import V2_OPS, Batch, Skip, image_files, main, recipe_ops

_OPS = {  # where PILToTensor comes in each recipe
    "default": f"{V2_OPS['default']}+PILToTensor",
    "full": V2_OPS["full"].replace("+RandomErasing", "+PILToTensor+RandomErasing"),
}


def check(args: argparse.Namespace) -> None:
    try:
        import torchvision.datasets
        import torchvision.transforms.v2  # noqa: F401
    except ImportError as e:
        raise Skip(f"torchvision not importable: {e}") from e


def build(args: argparse.Namespace) -> Iterator[Batch]:
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2

    torch.manual_seed(args.seed)
    tf = v2.Compose(recipe_ops(args.image_size, args.recipe, pil=True))
    ds = datasets.ImageFolder(str(args.data / "images"), transform=tf)
    kwargs = {"prefetch_factor": args.prefetch_factor} if args.workers else {}
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, **kwargs
    )
    yield from loader


def config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "reads": "images (files)",
        "loader": f"ImageFolder(PIL) + {_OPS[args.recipe]}, DataLoader(shuffle=True, "
        f"num_workers={args.workers}, prefetch_factor={args.prefetch_factor})",
    }


def _expected(args: argparse.Namespace) -> int:
    return len(image_files(args.data)[0])  # made from DATA/images: one sample per JPEG


if __name__ == "__main__":
    main("imagefolder", build=build, config=config, check=check, expected=_expected)
