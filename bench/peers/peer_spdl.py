"""Meta's SPDL (``spdl.pipeline`` + ``spdl.io``) on DATA/images, as in SPDL's image examples:
a shuffled file list as the source; ``pipe(decode, concurrency=workers)``: per image
``spdl.io.demux_image`` (reads the file), the RandomResizedCrop box drawn from the header's
size, ``decode_packets`` with an FFmpeg filter graph ``crop=W:H:X:Y,scale=S:S:flags=bilinear
[,hflip],format=rgb24`` (FFmpeg's scaler, antialiased on downscale), ``convert_frames`` ->
uint8 HWC, viewed as CHW; ``aggregate(batch)``; ``pipe(collate)`` stacks into uint8
[B, 3, S, S]; a sink of ``prefetch`` batches; ``build(num_threads=workers)``. All in one
process (threads: SPDL's decoding releases the GIL). ``--recipe full``: ``flags=bicubic``, and
the recipe's tail (torchvision v2 TrivialAugmentWide + RandomErasing(0.25), which FFmpeg's
filters cannot express) on each decoded tensor in a stage of its own,
``pipe(augment, concurrency=workers)``, in the same threads (v2 holds the GIL for much of
it). SPDL needs FFmpeg's shared libraries (libavutil 56-61) on the system (Debian/Ubuntu:
``apt-get install ffmpeg``)."""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from typing import Any

from _common import Batch, Skip, image_files, main, recipe_ops, rrc_box


def check(args: argparse.Namespace) -> None:
    try:
        import spdl.io.utils
        import spdl.pipeline

        spdl.io.utils.get_ffmpeg_versions()  # loads libspdl, which links FFmpeg
    except (ImportError, RuntimeError) as e:
        first = str(e).split('", "', 1)[0].split('. "', 1)[-1].strip('"')
        raise Skip(
            f"SPDL could not load FFmpeg ({first[:200]}): it needs FFmpeg's shared libraries "
            "(libavutil 56-61), e.g. apt-get install ffmpeg"
        ) from e
    if args.recipe == "full":
        import torchvision.transforms.v2  # noqa: F401  (before the clock, as for the others)


def build(args: argparse.Namespace) -> Iterator[Batch]:
    import spdl.io
    import torch
    from spdl.pipeline import PipelineBuilder

    files, labels = image_files(args.data)
    order = list(range(len(files)))
    random.Random(args.seed).shuffle(order)
    size = args.image_size
    interp = _INTERP[args.recipe]
    tail = None
    if args.recipe == "full":  # the ops after the crop and flip
        from torchvision.transforms import v2

        torch.manual_seed(args.seed)  # the tail's v2 ops draw from torch's global generator
        tail = v2.Compose(recipe_ops(size, "full")[2:])

    def decode(i: int) -> tuple[Any, int]:
        rng = random.Random(args.seed * 1_000_003 + i)
        packets = spdl.io.demux_image(files[i])
        x, y, w, h = rrc_box(packets.width, packets.height, rng)
        flip = ",hflip" if rng.random() < 0.5 else ""
        desc = f"crop={w}:{h}:{x}:{y},scale={size}:{size}:flags={interp}{flip},format=rgb24"
        frames = spdl.io.decode_packets(packets, filter_desc=desc)
        hwc = spdl.io.to_torch(spdl.io.convert_frames(frames))
        return hwc.permute(2, 0, 1), labels[i]

    def augment(item: tuple[Any, int]) -> tuple[Any, int]:
        return tail(item[0]), item[1]

    def collate(items: list[tuple[Any, int]]) -> Batch:
        images = torch.stack([t for t, _ in items])
        return images, torch.tensor([label for _, label in items])

    builder = PipelineBuilder().add_source(order).pipe(decode, concurrency=args.workers)
    if tail is not None:
        builder = builder.pipe(augment, concurrency=args.workers)
    pipeline = (
        builder.aggregate(args.batch_size)
        .pipe(collate)
        .add_sink(args.prefetch_factor)
        .build(num_threads=args.workers)
    )
    with pipeline.auto_stop():
        yield from pipeline.get_iterator()


# FFmpeg's scaler flags for the crop's resize, by recipe
_INTERP = {"default": "bilinear", "full": "bicubic"}


def config(args: argparse.Namespace) -> dict[str, Any]:
    tail = ""
    if args.recipe == "full":
        tail = f".pipe(v2 TrivialAugmentWide+RandomErasing(0.25), concurrency={args.workers})"
    return {
        "reads": "images (files)",
        "loader": f"PipelineBuilder().add_source(shuffled files).pipe(demux_image + "
        f"decode_packets(crop,scale {_INTERP[args.recipe]},hflip) , concurrency={args.workers})"
        f"{tail}.aggregate({args.batch_size}).pipe(stack).add_sink({args.prefetch_factor})"
        f".build(num_threads={args.workers})",
    }


def _expected(args: argparse.Namespace) -> int:
    return len(image_files(args.data)[0])  # made from DATA/images: one sample per JPEG


if __name__ == "__main__":
    main("spdl", build=build, config=config, check=check, expected=_expected)
