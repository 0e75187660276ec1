"""``wdstool show SRC --out DIR``: a report of samples, labels, captions, statistics and what
the model sees; ``--png FILE`` the contact sheet alone, ``--json`` the numbers."""

from __future__ import annotations

import sys
from typing import Any

import click

from wdstool.base.errors import ConfigError
from wdstool.base.params import format_size
from wdstool.cli.common import (
    emit_json,
    field_specs,
    progress_enabled,
    storage_options_from_cli,
)
from wdstool.show.show_config import HEADERS_PER_SAMPLE, WALK_SHARE, ShowConfig

_D = ShowConfig()


@click.command("show")
@click.argument("source", type=str)
@click.option(
    "--out",
    "out_dir",
    default=None,
    metavar="DIR",
    help="Write the report here: DIR/index.html and its pictures, opens offline. DIR must be "
    "new, empty, or a report written before (which is replaced).",
)
@click.option(
    "--png", default=None, metavar="FILE", help="Write the contact sheet alone as one PNG."
)
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON on stdout.")
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=_D.samples,
    show_default=True,
    help="How many samples to show, drawn across shards (every sample when the data set has "
    "no more).",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=_D.seed,
    show_default=True,
    help="Draws the samples, and their augmentations as a training run with this seed would.",
)
@click.option(
    "--transform",
    default=_D.transform,
    show_default=True,
    metavar="NAME|module:attr",
    help="The training recipe whose output is shown: a preset (default, eval, bicubic, randaug, "
    "trivialaug, clip, eval-bicubic, timm-train, timm-eval, tutorial, tutorial-eval: as "
    "stream-bench's) or an importable pipeline (torchvision v1 or v2, timm, albumentations).",
)
@click.option(
    "--eval-transform",
    default=_D.eval_transform,
    show_default=True,
    metavar="NAME|module:attr|none",
    help="The recipe shown beside it (none: no eval column).",
)
@click.option(
    "--epochs",
    type=click.IntRange(min=0),
    default=_D.epochs,
    show_default=True,
    help="Epochs of the training recipe shown (each draws other crops and flips).",
)
@click.option(
    "--image-size",
    type=click.IntRange(min=8),
    default=_D.image_size,
    show_default=True,
    help="The recipes' output size, as make_loader(image_size=...).",
)
@click.option(
    "--label",
    default=_D.label,
    show_default=True,
    metavar="cls|json:PATH|none",
    help="Where each sample's integer label is (named by the manifest's classes).",
)
@click.option(
    "--field",
    "fields",
    multiple=True,
    metavar="NAME=SPEC",
    help="Show these fields on each sample (repeatable): SPEC is txt, json, json:PATH or any "
    "member extension (shown as its size). Default: the .txt member as the caption.",
)
@click.option(
    "--header-samples",
    type=click.IntRange(min=0),
    default=None,
    help="Samples whose headers are read for the statistics besides the shown ones, a few "
    f"after each (~3 KB each on S3) [default: up to {HEADERS_PER_SAMPLE} after each shown "
    f"sample, reading at most {WALK_SHARE:.0%} of its bytes].",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@storage_options_from_cli
def show_cmd(
    source: str,
    out_dir: str | None,
    png: str | None,
    as_json: bool,
    samples: int,
    seed: int,
    transform: str,
    eval_transform: str,
    epochs: int,
    image_size: int,
    label: str,
    fields: tuple[str, ...],
    header_samples: int | None,
    quiet: bool,
    storage_options: dict[str, Any] | None,
) -> None:
    """Look at a data set: samples, labels, captions, statistics and what the model sees.

    SOURCE is anything make_loader reads: a folder or prefix holding index.json, the manifest
    itself, a folder of .tar shards, or a brace pattern of shard URLs (local or s3://).
    Only the manifest and the drawn samples are read (ranged reads on S3): a large data set
    costs what is shown, not what it holds.

    Parquet files too (a .parquet file, a folder or glob of them, s3://, an https brace
    pattern, hf://datasets/ORG/NAME, with #SPLIT): their footers, then only the row groups of
    the rows drawn (their image, label and shown columns, by range). The label is the
    ClassLabel column (or --label COLUMN), the fields every other column holding no bytes (or
    --field NAME=COLUMN).

    \b
    The report (--out DIR) has:
      - a contact sheet: each sample's image, key, label (class name), caption or --field
        values, size and format; click for the full image. A video sample shows a strip
        of a few frames spread over it (only those decoded) and its size, codec, length,
        frame rate and audio; click for the video (an MP4 or WebM a browser plays);
      - what the model sees: each image sample as make_loader delivers it with --transform
        for --epochs epochs, and --eval-transform beside it, with the same seed as training;
      - statistics with a chart and a table each: samples and bytes per shard, classes,
        image sizes, video lengths, formats (chroma subsampling, video codecs), members per
        sample, skipped inputs.

    \b
    Examples:
      wdstool show data/shards --out report
      wdstool show s3://bucket/train --samples 32 --transform randaug --out report
      wdstool show data/shards --png sheet.png --samples 24
      wdstool show data/captions --field caption=txt --field url=json:url --json
    """
    if out_dir is None and png is None and not as_json:
        raise ConfigError("say what to write: --out DIR (the report), --png FILE and/or --json")
    config = ShowConfig(
        samples=samples,
        seed=seed,
        epochs=epochs,
        transform=transform,
        eval_transform=None if eval_transform.lower() == "none" else eval_transform,
        image_size=image_size,
        label=None if label.lower() == "none" else label,
        fields=field_specs(fields),
        header_samples=header_samples,
    )
    from tqdm import tqdm

    from wdstool.show.report import build_report

    bar = tqdm(
        total=None, unit="step", disable=not progress_enabled(quiet), file=sys.stderr, desc="show"
    )

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done)

    try:
        summary = build_report(
            source,
            config,
            out_dir=out_dir,
            png=png,
            storage_options=storage_options,
            progress=progress,
        )
    finally:
        bar.close()
    if as_json:
        emit_json(summary)
    reads = summary["reads"]
    lines = [
        f"{len(summary['samples'])} samples of {source}; read {format_size(reads['bytes'])} in "
        f"{reads['requests']} requests (samples shown: {format_size(reads['shown_bytes'])})"
    ]
    if out_dir:
        lines.append(f"report: {out_dir}/index.html")
    if png:
        lines.append(f"contact sheet: {png}")
    for line in lines:
        click.echo(line, err=as_json)
