"""wdstool's loader (``loaders.make_loader``) on DATA/shards (``--wdstool-shards DIR``: DATA/DIR,
e.g. the same images packed with ``--restart-markers``): the row every peer is compared with. Defaults as documented: block shuffle (buffer 2,000), prefetch 4 batches per worker,
the crop drawn from the JPEG header and only the crop decoded, uint8 batches. ``--recipe full``:
``transform=`` the "trivialaug" preset (loaders/recipe/presets.py): its RandomResizedCrop
bicubic + flip fused into the partial decode, TrivialAugmentWide + RandomErasing(0.25) in the
workers on the crop, seeded per sample."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from _common import Batch, main


def check(args: argparse.Namespace) -> None:
    import loaders  # noqa: F401  (imported before the clock starts, as for every peer)


def transform(args: argparse.Namespace) -> Any:
    """The recipe as ``make_loader(transform=...)`` takes it (None: the built-in recipe)."""
    from loaders.recipe.presets import resolve_transform

    if args.recipe == "default":
        return None
    return resolve_transform("trivialaug", args.image_size).transform


def build(args: argparse.Namespace) -> Iterator[Batch]:
    from loaders import make_loader

    loader = make_loader(
        str(args.data / args.wdstool_shards),
        batch_size=args.batch_size,
        num_workers=args.workers,
        image_size=args.image_size,
        prefetch_factor=args.prefetch_factor,
        seed=args.seed,
        output="uint8",
        transform=transform(args),
    )
    loader.set_epoch(0)
    for batch in loader:
        yield batch["pixel_values"], batch["labels"]


def config(args: argparse.Namespace) -> dict[str, Any]:
    loader = (
        f"loaders.make_loader(num_workers={args.workers}, "
        f"prefetch_factor={args.prefetch_factor}, shuffle_buffer=2000, output='uint8'"
    )
    reads = f"{args.wdstool_shards} (tar)"
    if args.wdstool_shards != "shards":
        import json

        options = json.loads((args.data / args.wdstool_shards / "index.json").read_text()).get(
            "pack_options", {}
        )
        how = [f"--max-side {options['max_side']}"] if options.get("max_side") else []
        how += ["--restart-markers"] if options.get("restart_markers") else []
        if how:
            reads = f"{args.wdstool_shards} (tar, packed with {' '.join(how)})"
    if args.recipe == "default":
        return {"reads": reads, "loader": loader + ")"}
    from loaders.recipe import build_recipe

    recipe = build_recipe(transform(args), train=True, image_size=args.image_size, output="uint8")
    return {
        "reads": reads,
        "loader": f"{loader}, transform=presets 'trivialaug'): {recipe.describe()}",
    }


if __name__ == "__main__":
    main("wdstool", build=build, config=config, check=check)
