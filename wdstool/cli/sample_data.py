"""``wdstool sample-data``: a realistic ImageFolder tree of JPEGs for demos and benchmarks."""

from __future__ import annotations

import click

from wdstool.base.params import DIMENSIONS, format_size
from wdstool.cli.common import progress_enabled
from wdstool.cli.defaults import library_option

LIBRARY = "shard_writer:generate_sample_data"  # its keywords' defaults are the options'


@click.command("sample-data")
@click.argument("dest", type=click.Path(file_okay=False))
@library_option(
    LIBRARY,
    "--images",
    "-n",
    type=click.IntRange(min=1),
    help="Number of images to write.",
)
@library_option(
    LIBRARY,
    "--classes",
    "-c",
    type=click.IntRange(min=1),
    help="Number of class folders (class_000, class_001, ...).",
)
@library_option(LIBRARY, "--seed", type=int, help="Same seed, same bytes.")
@library_option(
    LIBRARY,
    "--size",
    type=DIMENSIONS,
    shown=lambda wh: f"{wh[0]}x{wh[1]}",
    help="Nominal WIDTHxHEIGHT of the images (each side varies by about +-11%), e.g. 1600x1200 "
    "for large-image benchmarks.",
)
@library_option(
    LIBRARY,
    "--workers",
    type=click.IntRange(min=1),
    help="Processes to use [default: usable cores].",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar, no summary.")
def sample_data_cmd(
    dest: str,
    images: int,
    classes: int,
    seed: int,
    size: tuple[int, int],
    workers: int | None,
    quiet: bool,
) -> None:
    """Write a realistic ImageFolder tree of JPEGs to DEST.

    Images are cut from the real photographs that ship inside scikit-image, scikit-learn and
    matplotlib (no network), randomly cropped, rotated, flipped, colour-jittered and noised:
    about 450x380 px (or --size), JPEG quality 90, ~100 KB each at the default size, an
    ImageNet-like decode cost.
    """
    from shard_writer import generate_sample_data

    summary = generate_sample_data(
        dest,
        images=images,
        classes=classes,
        seed=seed,
        workers=workers,
        size=size,
        progress=progress_enabled(quiet),
    )
    if not quiet:
        click.echo(
            f"wrote {summary.images} images in {summary.classes} classes to {summary.root} "
            f"({format_size(summary.total_bytes)}, {summary.total_bytes / summary.images / 1e3:.0f} KB "
            f"per image, {summary.seconds:.1f} s)"
        )
