"""What the commands that write a data set share (pack, reshard, split): their shard, shuffle,
re-encoding, worker and DEST options, the progress bar, and the summary they print."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from wdstool.base.params import BYTE_SIZE, format_size
from wdstool.cli.common import emit_json, progress_enabled
from wdstool.cli.defaults import library_option

T = TypeVar("T")


def write_options(
    *, defaults: str, what: str, append: bool = True
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options of a command writing shards, with the defaults of its options class
    (``defaults``: ``"module:Class"``, e.g. ``"shard_writer:PackOptions"``); ``what``: what it
    writes from, for the help; ``append``: whether it offers --append. They reach the command
    as keyword arguments named as the class's fields."""

    option = functools.partial(library_option, defaults)
    options = [
        option(
            "--max-count",
            type=click.IntRange(min=1),
            help="At most this many samples per shard.",
        ),
        option(
            "--max-size",
            type=BYTE_SIZE,
            shown=format_size,
            help="At most this many bytes per shard on disk, tar headers included "
            "(exceeded only by a single sample larger than it).",
        ),
        option(
            "--prefix",
            help="Shard names: PREFIX-000000.tar, PREFIX-000001.tar, ...",
        ),
        option(
            "--workers",
            type=click.IntRange(min=1),
            help="Processes writing shards [default: usable cores]. Output is identical "
            "whatever the number.",
        ),
        option(
            "--seed",
            type=int,
            help="Seed of the write-time shuffle.",
        ),
        option(
            "--shuffle/--no-shuffle",
            help=f"Shuffle the samples across shards; --no-shuffle keeps {what}.",
        ),
        option(
            "--max-side",
            type=click.IntRange(min=8),
            help="Downscale images whose longest side exceeds PX and re-encode them as JPEG "
            "(images only: videos are stored as they are).",
        ),
        option(
            "--quality",
            type=click.IntRange(1, 100),
            help="Re-encode every image as JPEG at this quality (90 with --max-side alone; "
            "images only: videos are stored as they are).",
        ),
        option(
            "--restart-markers",
            is_flag=True,
            help="Rewrite JPEGs of 1 MP and more with restart markers every ~64 px of a row "
            "(lossless: the same DCT coefficients, checked; optimized Huffman tables, one "
            "baseline scan, EXIF/ICC kept), so that the loaders decode only the part of the "
            "file a crop covers: ~1.5x faster crops of large images. Every JPEG reader reads "
            "them; a whole decode is ~5% slower. Smaller images (and videos) keep their bytes.",
        ),
        option(
            "--on-error",
            type=click.Choice(["skip", "raise", "fail"]),
            callback=lambda _ctx, _param, value: "raise" if value == "fail" else value,
            help="skip: leave bad inputs out and list them (summary and index.json "
            "'skipped'); raise: stop at the first one, naming it, and publish nothing (fail is "
            "its older name, still accepted).",
        ),
        option("--overwrite", is_flag=True, help="Replace a different data set already in DEST."),
        option(
            "--sync/--no-sync",
            help="fsync every shard before index.json is written. --no-sync is faster on slow "
            "disks, but a power loss right after can leave a manifest naming unflushed data.",
        ),
        option(
            "--engine",
            type=click.Choice(["local", "ray"]),
            help="local: a process pool on this machine. ray: the work runs as Ray tasks "
            "(pip install -e '.[ray]'); same bytes as local. SRC and DEST must then be "
            "reachable from every node (s3://... for both, or a shared folder).",
        ),
        option(
            "--ray-address",
            metavar="HOST:PORT",
            help="Join this Ray cluster (else RAY_ADDRESS; else a local instance on 127.0.0.1 "
            "with --workers CPUs is started and stopped). Clusters started with `ray start` use "
            "token auth: the driver needs the cluster's token (RAY_AUTH_TOKEN or "
            "~/.ray/auth_token).",
        ),
        click.option(
            "--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout."
        ),
        click.option("-q", "--quiet", is_flag=True, help="No progress bar and no human summary."),
    ]

    if append:
        options.append(
            option(
                "--append",
                is_flag=True,
                help="Add the result to the data set in DEST as a new version: new shards after "
                "its last one (old shards untouched), index.json replaced with every shard and the "
                "version history. DEST must hold a data set.",
            )
        )

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        for add in reversed(options):
            f = add(f)
        return f

    return decorate


def options_from(cls: type[T], params: dict[str, Any]) -> T:
    """The options object (``cls``, a dataclass: PackOptions, ReshardOptions) of the parsed
    options that are its fields; the others (``--json``, ``-q``, ...) are the command's own."""
    return cls(**{f.name: params[f.name] for f in dataclasses.fields(cls) if f.name in params})


def run_with_progress(quiet: bool, desc: str, run: Callable[..., Any]) -> Any:
    """``run(progress=..., on_total=...)`` under a progress bar on stderr (a terminal only)."""
    from tqdm import tqdm

    bar = tqdm(
        total=0,
        unit="img",
        unit_scale=True,
        disable=not progress_enabled(quiet),
        file=sys.stderr,
        dynamic_ncols=True,
        desc=desc,
    )
    state = {"bytes": 0, "shards": 0, "total_shards": 0}

    def on_total(items: int, shards: int, phase: str) -> None:
        bar.reset(total=items)
        bar.set_description(phase)
        if not bar.disable:  # a disabled bar answers format_dict only while it has no unit
            bar.unit = "shard" if phase == "scan" else "img"
        state["total_shards"] = shards

    def progress(n: int, nbytes: int, shards: int) -> None:
        state["bytes"] += nbytes
        state["shards"] += shards
        bar.update(n)
        elapsed = bar.format_dict.get("elapsed") or 0
        mbs = state["bytes"] / 1e6 / elapsed if elapsed else 0.0
        if state["total_shards"]:
            bar.set_postfix_str(
                f"{mbs:.0f} MB/s, shards {state['shards']}/{state['total_shards']}", refresh=False
            )

    try:
        return run(progress=progress, on_total=on_total)
    finally:
        bar.close()


def print_summary(summary: Any, *, as_json: bool, quiet: bool, verb: str, noun: str) -> None:
    """The summary of a write: JSON on stdout, or a few lines for people."""
    if as_json:
        emit_json(summary.to_json())
        return
    if quiet:
        return
    if summary.up_to_date:
        click.echo(
            f"{summary.dest}: already complete ({summary.shards} shards, "
            f"{summary.samples} samples); nothing to do"
        )
        return
    classes = f" in {summary.classes} classes" if summary.classes else ""
    version = summary.extra.get("version")
    click.echo(
        f"{verb} {summary.samples} {noun}{classes} into {summary.shards} "
        f"shards ({format_size(summary.total_bytes)}) at {summary.dest}"
        + (
            f" as version {version} (now {summary.extra['dataset_shards']} shards, "
            f"{summary.extra['dataset_samples']} samples)"
            if version
            else ""
        )
        + f"\n  {summary.seconds:.1f} s, {summary.images_per_s:.0f} {noun}/s, "
        f"{summary.mb_per_s:.0f} MB/s, {summary.workers} workers; "
        f"{summary.written_shards} shards written, {summary.reused_shards} reused"
    )
    videos = summary.extra.get("videos")
    if videos:
        click.echo(f"  videos: {videos['count']} ({videos['seconds']:.1f} s in all)")
    docs = summary.extra.get("interleaved")
    if docs:
        click.echo(
            f"  images: {docs['images']} in {docs['samples']} samples, "
            f"{docs['chars']} characters of text"
        )
    for what in ("renamed", "duplicates"):
        if summary.extra.get(what):
            click.echo(f"  {what}: {summary.extra[what]}")
    restarts = summary.extra.get("restart_markers")
    if restarts:
        kept = ", ".join(f"{why}: {n}" for why, n in restarts["kept"].items())
        click.echo(
            f"  restart markers: added to {restarts['added']} images"
            + (f"; kept as they were: {kept}" if kept else "")
        )
    per_node = summary.extra.get("shards_per_node")
    if per_node:
        click.echo(
            "  ray shards per node: " + ", ".join(f"{node} {n}" for node, n in per_node.items())
        )
    if summary.skipped:
        click.echo(f"  skipped {len(summary.skipped)} inputs:")
        for s in summary.skipped[:20]:
            row = f"row {s['row']}: " if s.get("row") else ""
            key = f" {s['key']}" if s.get("key") else ""
            click.echo(f"    {row}{s['path']}{key}: {s['reason']}")
        if len(summary.skipped) > 20:
            click.echo(f"    ... and {len(summary.skipped) - 20} more (see index.json 'skipped')")
