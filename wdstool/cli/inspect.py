"""``wdstool inspect`` and ``wdstool verify``: read a packed dataset back."""

from __future__ import annotations

import sys
from typing import Any

import click

from wdstool.base.params import format_size
from wdstool.cli.common import (
    emit_json,
    progress_enabled,
    storage_options_from_cli,
)
from wdstool.cli.defaults import library_option


@click.command("inspect")
@click.argument("source", type=str)
@library_option(
    "shard_writer:inspect_dataset",
    "--keys",
    "nkeys",
    type=click.IntRange(min=0),
    help="How many sample keys to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON on stdout.")
@storage_options_from_cli
def inspect_cmd(
    source: str, nkeys: int, as_json: bool, storage_options: dict[str, Any] | None
) -> None:
    """Show the shards, samples, classes and sizes of a packed dataset, how many samples are
    videos and their duration in all (as index.json records them), for samples of several
    images their images (in all, and per sample: min, mean, max) and characters of text, and
    its versions when something was appended to it (pack/reshard --append).

    SOURCE is a folder or prefix holding index.json, or the manifest's own path/URL. It may
    also name Parquet files as make_loader reads them (a .parquet file, a folder or glob of
    them, s3://..., an https brace pattern, hf://datasets/ORG/NAME, with #SPLIT): then their
    files, row groups, rows, columns (kinds and feature types), image and label columns,
    class names and bytes, from the footers alone.
    """
    from shard_writer import inspect_dataset, inspect_parquet
    from wdstool.format.row_groups import parquet_or

    info = parquet_or(
        source,
        storage_options,
        lambda: inspect_dataset(source, nkeys=nkeys, storage_options=storage_options),
        lambda: inspect_parquet(source, nkeys=nkeys, storage_options=storage_options),
    )
    if as_json:
        emit_json(info)
        return
    if info.get("format") == "parquet":
        _echo_parquet(info)
        return
    click.echo(f"dataset   {info['manifest']}")
    click.echo(
        f"shards    {info['num_shards']}  (samples per shard: min {info['min_samples']}, "
        f"max {info['max_samples']})"
    )
    click.echo(f"samples   {info['num_samples']}")
    if info["num_videos"] is None:
        click.echo("videos    not counted (index.json records none; pack it to count them)")
    elif info["num_videos"]:
        click.echo(f"videos    {info['num_videos']}  ({info['video_seconds']:.1f} s in all)")
    docs = info.get("interleaved")
    if docs:
        each = docs["images_per_sample"]
        click.echo(
            f"images    {docs['images']} in {docs['samples']} samples of several images  (per "
            f"sample: min {each['min']}, mean {each['mean']:.2f}, max {each['max']})"
        )
        click.echo(f"text      {docs['chars']} characters")
    click.echo(f"bytes     {format_size(info['total_bytes'])}")
    click.echo(_classes_line(info["classes"]))
    click.echo(f"skipped   {len(info['skipped'])} inputs at pack time")
    for v in info.get("versions", []):
        inputs = ", ".join(v["inputs"]) or "(not recorded)"
        click.echo(
            f"version {v['version']}: {v['created'] or 'time unknown'}  {v['command']} "
            f"+{v['added_shards']} shards +{v['added_samples']} samples -> {v['shards']} "
            f"shards, {v['samples']} samples; input {inputs}"
        )
    _echo_first(
        info,
        "shards",
        lambda s: (
            f"{s['url']}  {s['nsamples']} samples  {format_size(s['filesize'])}  "
            f"sha256 {s['sha256'][:12]}"
        ),
    )


def _echo_parquet(info: dict[str, Any]) -> None:
    click.echo(f"dataset   {info['source']}  (Parquet)")
    click.echo(
        f"files     {info['num_files']}  ({info['num_row_groups']} row groups, rows per group: "
        f"min {info['min_rows']}, max {info['max_rows']})"
    )
    click.echo(f"samples   {info['num_samples']} rows")
    click.echo(f"bytes     {format_size(info['total_bytes'])}")
    for c in info["columns"]:
        role = {info["image_column"]: "  <- image", info["label_column"]: "  <- label"}
        feature = c["feature"] if c["feature"] not in (None, "Value") else None
        kind = f"{feature} ({c['kind']})" if feature else c["kind"]
        click.echo(
            f"column    {c['name']}: {kind}, {format_size(c['bytes'])}{role.get(c['name'], '')}"
        )
    if info["image_column"] is None:
        click.echo("image     no image column found (name one: Source(url, image=COLUMN))")
    if info["classes"]:
        click.echo(_classes_line(info["classes"]))
    _echo_first(
        info,
        "files",
        lambda f: (
            f"{f['url']}  {f['rows']} rows  {f['row_groups']} row groups  {format_size(f['bytes'])}"
        ),
    )


def _classes_line(classes: list[str]) -> str:
    if not classes:
        return "classes   none (no class labels)"
    more = " ..." if len(classes) > 10 else ""
    return f"classes   {len(classes)}: {', '.join(classes[:10])}{more}"


def _echo_first(info: dict[str, Any], what: str, line: Any) -> None:
    """The first five of ``info[what]`` (shards, files) a line each, how many more, the first
    keys."""
    for item in info[what][:5]:
        click.echo(f"  {line(item)}")
    if len(info[what]) > 5:
        click.echo(f"  ... {len(info[what]) - 5} more {what}")
    if info["sample_keys"]:
        click.echo("first keys: " + ", ".join(info["sample_keys"]))


@click.command("verify")
@click.argument("source", type=str)
@click.option(
    "--decode",
    is_flag=True,
    help="Also decode every image, and probe every video (streams, frames, first frame decoded).",
)
@click.option(
    "--allow-unsafe-names",
    is_flag=True,
    help="Members unsafe to extract become warnings, not errors (for data sets someone else "
    "made; wdstool's readers never extract).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@storage_options_from_cli
def verify_cmd(
    source: str,
    decode: bool,
    allow_unsafe_names: bool,
    as_json: bool,
    quiet: bool,
    storage_options: dict[str, Any] | None,
) -> None:
    """Re-read every shard and check it against index.json.

    Checks sizes, sha256, tar structure, member layout (KEY.<image or video>, KEY.cls; a video
    member's bytes must be a video container) and sample counts; with --decode every image is
    decoded and every video probed as pack does. A sample of several images (KEY.0.jpg,
    KEY.1.png, ...) must match its KEY.json's "texts" and "images" lists (no member missing,
    none extra) and the manifest's image counts, sizes and text lengths; with --decode every
    image of it is decoded. Exits non-zero naming the first bad shard (and sample).

    Members unsafe to extract with tar -x (absolute or '..' names, symlinks, hard links,
    devices, FIFOs, non-UTF-8 names) are all listed, one line each, then fail the run unless
    --allow-unsafe-names makes them warnings.

    Samples that carry different member sets (some with KEY.txt, some without: other tools'
    shards) are a warning on stderr naming the first such sample; readers that take their
    columns from the first samples (Hugging Face datasets) would drop those members.
    Parquet files (SOURCE as inspect takes them): every row group's image column (and label
    column) is read by range and decoded by pyarrow; each must hold the rows its footer says,
    every image must be a known format whose header parses and that is not cut short (with
    --decode: that decodes), every label one of the ClassLabel names. Each damaged row group
    is named on stderr (file and row group), all of them; then the run fails.
    """
    from tqdm import tqdm

    from shard_writer import DamagedRowGroups, UnsafeMember, verify_dataset, verify_parquet
    from wdstool.base.errors import UnsafeMembersError
    from wdstool.format.row_groups import parquet_or

    def on_unsafe(problem: UnsafeMember) -> None:
        level = "Warning" if allow_unsafe_names else "Error"
        tqdm.write(f"{level}: {problem.line()}", file=sys.stderr)

    bar = tqdm(
        total=None,
        unit="B",
        unit_scale=True,
        disable=not progress_enabled(quiet),
        file=sys.stderr,
        desc="verify",
    )

    def on_damaged(line: str) -> None:
        tqdm.write(f"Error: {line}", file=sys.stderr)

    try:
        report = parquet_or(
            source,
            storage_options,
            lambda: verify_dataset(
                source,
                decode=decode,
                allow_unsafe_names=allow_unsafe_names,
                on_bytes=bar.update,
                on_unsafe=on_unsafe,
                storage_options=storage_options,
            ),
            lambda: verify_parquet(
                source,
                decode=decode,
                on_bytes=bar.update,
                on_damaged=on_damaged,
                storage_options=storage_options,
            ),
        )
    except (UnsafeMembersError, DamagedRowGroups) as exc:
        if as_json:
            emit_json(exc.report)
        raise
    finally:
        bar.close()
    for warning in report["warnings"]:
        click.echo(f"Warning: {warning}", err=True)
    if as_json:
        emit_json(report)
    elif report.get("format") == "parquet":
        click.echo(
            f"ok: {report['num_files']} files, {report['num_row_groups']} row groups, "
            f"{report['num_samples']} rows, image column {report['image_column']!r}"
            + (f", label column {report['label_column']!r}" if report["label_column"] else "")
            + f"; {format_size(report['total_bytes'])} of files, "
            f"{format_size(report['bytes_read'])} read" + (" (images decoded)" if decode else "")
        )
    else:
        unsafe = len(report["unsafe_members"])
        videos = report["num_videos"]
        images = report["num_images"]
        click.echo(
            f"ok: {report['num_shards']} shards, {report['num_samples']} samples"
            + (f" ({videos} videos)" if videos else "")
            + (f" ({images} images)" if images else "")
            + f", {format_size(report['total_bytes'])} verified"
            + (
                (" (images decoded, videos probed)" if videos else " (images decoded)")
                if decode
                else ""
            )
            + (f" ({unsafe} unsafe member(s) allowed)" if unsafe else "")
        )
