"""``wdstool pack``: an ImageFolder tree or a listing file -> tar shards + index.json."""

from __future__ import annotations

import sys
from typing import Any

import click

from wdstool.base.params import BYTE_SIZE, format_size
from wdstool.cli.common import emit_json, progress_enabled, storage_options_from_cli


@click.command("pack")
@click.argument("src", type=str)
@click.argument("dest", type=str)
@click.option(
    "--max-count",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="At most this many samples per shard.",
)
@click.option(
    "--max-size",
    type=BYTE_SIZE,
    default="256MB",
    show_default=True,
    help="At most this many bytes per shard on disk, tar headers included "
    "(exceeded only by a single sample larger than it).",
)
@click.option(
    "--prefix",
    default="train",
    show_default=True,
    help="Shard names: PREFIX-000000.tar, PREFIX-000001.tar, ...",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Processes writing shards [default: usable cores]. Output is identical "
    "whatever the number.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the pack-time shuffle across classes.",
)
@click.option(
    "--shuffle/--no-shuffle",
    default=True,
    show_default=True,
    help="--no-shuffle keeps the source order (ImageFolder order: class-sorted shards; a "
    "listing: its row order).",
)
@click.option(
    "--max-side",
    type=click.IntRange(min=8),
    default=None,
    help="Downscale images whose longest side exceeds PX and re-encode them as JPEG.",
)
@click.option(
    "--quality",
    type=click.IntRange(1, 100),
    default=None,
    help="Re-encode every image as JPEG at this quality (90 with --max-side alone).",
)
@click.option(
    "--on-error",
    type=click.Choice(["skip", "fail"]),
    default="skip",
    show_default=True,
    help="skip: leave bad inputs out and list them; fail: stop at the first one and "
    "publish nothing.",
)
@click.option(
    "--verify-decode",
    is_flag=True,
    help="Fully decode every image (catches truncated data); by default only the "
    "header and end marker are checked.",
)
@click.option("--overwrite", is_flag=True, help="Replace a different dataset already in DEST.")
@click.option(
    "--resume",
    is_flag=True,
    help="Finish an interrupted pack (also what a plain rerun does): complete shards "
    "are kept after checking their size and sha256.",
)
@click.option(
    "--sync/--no-sync",
    default=True,
    show_default=True,
    help="fsync every shard before index.json is written. --no-sync is faster on slow disks, "
    "but a power loss right after the pack can leave a manifest naming unflushed data.",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local: a process pool on this machine. ray: probing and every shard run as Ray "
    "tasks (pip install 'wdstool[ray]'); same bytes as local. SRC and DEST must then be "
    "reachable from every node (s3://... for both, or a shared folder).",
)
@click.option(
    "--ray-address",
    default=None,
    metavar="HOST:PORT",
    help="Join this Ray cluster (else RAY_ADDRESS; else a local instance on 127.0.0.1 with "
    "--workers CPUs is started and stopped). Clusters started with `ray start` use token "
    "auth: the driver needs the cluster's token (RAY_AUTH_TOKEN or ~/.ray/auth_token).",
)
@click.option(
    "--path-column",
    default=None,
    metavar="NAME",
    help="Listing SRC: the column holding the image paths [default: path].",
)
@click.option(
    "--label-column",
    default=None,
    metavar="NAME",
    help="Listing SRC: the column holding labels (ints, or class names indexed in sorted "
    "order) [default: label, if there is one].",
)
@click.option(
    "--caption-column",
    default=None,
    metavar="NAME",
    help="Listing SRC: the column holding captions, stored as KEY.txt in every sample (empty "
    "where a row has none) [default: caption, if there is one].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no human summary.")
@storage_options_from_cli
def pack_cmd(
    src: str,
    dest: str,
    max_count: int,
    max_size: int,
    prefix: str,
    workers: int | None,
    seed: int,
    shuffle: bool,
    max_side: int | None,
    quality: int | None,
    on_error: str,
    verify_decode: bool,
    overwrite: bool,
    resume: bool,
    sync: bool,
    engine: str,
    ray_address: str | None,
    path_column: str | None,
    label_column: str | None,
    caption_column: str | None,
    as_json: bool,
    quiet: bool,
    storage_options: dict[str, Any] | None,
) -> None:
    """Convert SRC into tar shards in DEST. SRC is either

    \b
    - an ImageFolder tree: SRC/<class>/<image>, labels from the class folders
      (sorted, as torchvision's ImageFolder), or
    - a listing file: a .csv, .tsv, .jsonl or .parquet file with one row per image.
      Columns: path (required; relative to the listing's folder, absolute, or a URL),
      label (optional; ints, or class names indexed in sorted order), caption (optional;
      KEY.txt in every sample, empty where a row has none), any others (stored in KEY.json). Rows keep their order
      until the pack-time shuffle. --path-column, --label-column and --caption-column
      name other columns.

    DEST gets PREFIX-000000.tar, ... and, last, index.json (a folder with index.json is a
    complete dataset). Samples: KEY.jpg (original bytes; extension from the real format),
    KEY.cls (class index, when labelled), KEY.txt (caption, with a caption column) and KEY.json
    (source path, class, width, height, and a listing's other columns): every sample of a
    data set carries the same members, as readers that infer columns from the first samples
    (Hugging Face datasets) need; images in several formats are a warning. The same input
    and options always give byte-identical shards. An interrupted pack is finished by
    running the same command again.

    DEST may be a local folder or any fsspec URL, e.g. s3://bucket/prefix: each shard is built
    locally, uploaded whole, checked (size and ETag), and index.json is uploaded last. SRC may
    be one too (a tree is listed once, recursively; images are read with ranged GETs).
    """
    from tqdm import tqdm

    from shard_writer.pack import PackOptions, pack

    options = PackOptions(
        prefix=prefix,
        max_count=max_count,
        max_size=max_size,
        shuffle=shuffle,
        seed=seed,
        workers=workers,
        on_error=on_error,
        verify_decode=verify_decode,
        max_side=max_side,
        quality=quality,
        overwrite=overwrite,
        sync=sync,
        engine=engine,
        ray_address=ray_address,
        path_column=path_column,
        label_column=label_column,
        caption_column=caption_column,
    )
    bar = tqdm(
        total=0,
        unit="img",
        unit_scale=True,
        disable=not progress_enabled(quiet),
        file=sys.stderr,
        dynamic_ncols=True,
        desc="pack",
    )
    state = {"bytes": 0, "shards": 0, "total_shards": 0}

    def on_total(items: int, shards: int, phase: str) -> None:
        bar.reset(total=items)
        bar.set_description(phase)
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
        summary = pack(
            src,
            dest,
            options,
            progress=progress,
            on_total=on_total,
            storage_options=storage_options,
        )
    finally:
        bar.close()
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
    click.echo(
        f"packed {summary.samples} images{classes} into {summary.shards} "
        f"shards ({format_size(summary.total_bytes)}) at {summary.dest}\n"
        f"  {summary.seconds:.1f} s, {summary.images_per_s:.0f} images/s, "
        f"{summary.mb_per_s:.0f} MB/s, {summary.workers} workers; "
        f"{summary.written_shards} shards written, {summary.reused_shards} reused"
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
            click.echo(f"    {row}{s['path']}: {s['reason']}")
        if len(summary.skipped) > 20:
            click.echo(f"    ... and {len(summary.skipped) - 20} more (see index.json 'skipped')")
