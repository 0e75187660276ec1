"""``wdstool sample-data``: a realistic ImageFolder tree of JPEGs (or, with ``--videos``, of
MP4 videos) for demos and benchmarks."""

from __future__ import annotations

import time
from typing import Any

import click
from click.core import ParameterSource

from wdstool.base.errors import ConfigError
from wdstool.base.host import usable_cores
from wdstool.base.params import DIMENSIONS, SECONDS_RANGE, format_size
from wdstool.cli.common import progress_enabled
from wdstool.cli.defaults import library_default, library_option

LIBRARY = "shard_writer:generate_sample_data"  # its keywords' defaults are the options'
VIDEOS = "shard_writer:generate_sample_videos"  # ... and the videos' ones
VIDEO_SETTINGS = "shard_writer:VideoSettings"


class _SecondsDefault(click.Option):
    """``--seconds``: its default is the library's (``min_seconds``, ``max_seconds``), read when
    the command runs or shows its help, as :class:`wdstool.cli.defaults.LibraryDefault` does."""

    def get_default(self, ctx: click.Context, call: bool = True) -> Any:
        lo, hi = (library_default(VIDEOS, name) for name in ("min_seconds", "max_seconds"))
        return (lo, hi) if call else f"{lo:g}-{hi:g}"


def _classes_shown(n: int) -> str:
    """--classes' default in the help: the images', and the videos' own."""
    return f"{n}; videos: {library_default(VIDEOS, 'classes')}"


def _size_shown(wh: tuple[int, int]) -> str:
    """--size's default in the help: the images', and the videos' own."""
    width, height = (library_default(VIDEO_SETTINGS, k) for k in ("width", "height"))
    return f"{wh[0]}x{wh[1]}; videos: {width}x{height}"


@click.command("sample-data")
@click.argument("dest", type=click.Path(file_okay=False))
@library_option(
    LIBRARY,
    "--images",
    "-n",
    type=click.IntRange(min=1),
    help="Number of images to write.",
)
@click.option(
    "--videos",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Write N sample videos instead of images: H.264 MP4s of --seconds each, a pan across "
    "one of the photographs with each frame's index drawn along its top edge (wdstool pack "
    "packs them as it packs images).",
)
@library_option(
    LIBRARY,
    "--classes",
    "-c",
    type=click.IntRange(min=1),
    shown=_classes_shown,
    help="Number of class folders (class_000, class_001, ...).",
)
@click.option(
    "--seconds",
    cls=_SecondsDefault,
    type=SECONDS_RANGE,
    show_default=True,
    help="With --videos: each video's length, drawn from MIN..MAX seconds by --seed (one "
    "number: all that long).",
)
@library_option(LIBRARY, "--seed", type=int, help="Same seed, same bytes.")
@library_option(
    LIBRARY,
    "--size",
    type=DIMENSIONS,
    shown=_size_shown,
    help="Nominal WIDTHxHEIGHT of the images (each side varies by about +-11%), e.g. 1600x1200 "
    "for large-image benchmarks; with --videos, the frames' exact size (even sides, >= 32).",
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
    videos: int | None,
    classes: int,
    seconds: tuple[float, float],
    seed: int,
    size: tuple[int, int],
    workers: int | None,
    quiet: bool,
) -> None:
    """Write a realistic ImageFolder tree of JPEGs (or, with --videos, of videos) to DEST.

    Images are cut from the real photographs that ship inside scikit-image, scikit-learn and
    matplotlib (no network), randomly cropped, rotated, flipped, colour-jittered and noised:
    about 450x380 px (or --size), JPEG quality 90, ~100 KB each at the default size, an
    ImageNet-like decode cost.

    \b
    Videos (--videos N): N H.264 MP4s panning across the same photographs, video i
    in class folder i % --classes (DEST/class_000/video_00000.mp4, ...); a run that
    was interrupted goes on where it stopped. For example:
      wdstool sample-data data/videos --videos 20 --classes 4 --seconds 2-6
    """
    ctx = click.get_current_context()
    given = {
        name
        for name in ("images", "classes", "seconds", "size")
        if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)
    }
    if videos is None:
        if "seconds" in given:
            raise click.UsageError("--seconds is for videos: add --videos N")
        _images(dest, images, classes, seed, size, workers, quiet)
        return
    if "images" in given:
        raise click.UsageError("give --images or --videos, not both")
    from shard_writer import VideoSettings

    if "classes" not in given:  # the videos' own default, at most one class a video
        classes = min(library_default(VIDEOS, "classes"), videos)
    if classes > videos:
        raise click.BadParameter(
            f"{classes}: must be within 1..{videos} (the number of videos)", param_hint="--classes"
        )
    options: dict[str, Any] = {
        "videos": videos,
        "classes": classes,
        "seed": seed,
        "min_seconds": seconds[0],
        "max_seconds": seconds[1],
        "workers": min(workers or usable_cores(), videos),
    }
    if "size" in given:
        try:
            options["settings"] = VideoSettings(width=size[0], height=size[1])
        except ConfigError as exc:
            raise click.BadParameter(exc.message, param_hint="--size") from None
    _write_videos(dest, options, quiet)


def _write_videos(dest: str, options: dict[str, Any], quiet: bool) -> None:
    """``generate_sample_videos(dest, **options)``, and a line saying what it wrote."""
    from shard_writer import generate_sample_videos

    if not quiet:
        click.echo(f"writing {options['videos']} videos to {dest} ...", err=True)
    started = time.perf_counter()
    total = generate_sample_videos(dest, **options)
    if not quiet:
        n = options["videos"]
        click.echo(
            f"wrote {n} videos in {options['classes']} classes to {dest} ({format_size(total)}, "
            f"{total / n / 1e3:.0f} KB per video, {time.perf_counter() - started:.1f} s)"
        )


def _images(
    dest: str,
    images: int,
    classes: int,
    seed: int,
    size: tuple[int, int],
    workers: int | None,
    quiet: bool,
) -> None:
    """``generate_sample_data``, as the command did before it wrote videos."""
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
