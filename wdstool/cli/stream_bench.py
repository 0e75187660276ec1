"""``wdstool stream-bench``: how fast the loaders deliver, against peers and the ceiling."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from wdstool.base.params import BYTE_SIZE, WORKER_LIST
from wdstool.cli.common import (
    field_specs,
    progress_enabled,
    storage_options_from_cli,
)
from wdstool.cli.defaults import library_option

BENCH = "loaders.bench.run:BenchConfig"  # the defaults of the benchmark's own options
# the defaults of the loader's options (make_loader's keywords, passed as BenchConfig.loader);
# where the benchmark measures something else by default, the option says so (default=...)
LOADER = "loaders.make:make_loader"


@click.command("stream-bench")
@click.argument("source", type=str)
@library_option(LOADER, "--batch-size", type=click.IntRange(min=1))
@library_option(
    BENCH,
    "--workers",
    type=WORKER_LIST,
    help="DataLoader workers; a list (0,1,2,4) runs a sweep.",
)
@library_option(LOADER, "--prefetch-factor", type=click.IntRange(min=1))
@click.option("--image-size", type=click.IntRange(min=8), default=224, show_default=True)
@click.option("--output", type=click.Choice(["uint8", "float"]), default="uint8", show_default=True)
@library_option(
    LOADER,
    "--channels-last",
    is_flag=True,
    help="Batches in channels-last memory (make_loader(channels_last=True)), as channels-last "
    "models take them.",
)
@click.option(
    "--eval",
    "eval_",
    is_flag=True,
    help="Measure the eval transform (resize shorter side + centre crop, make_loader(train=False)).",
)
@library_option(
    BENCH,
    "--transform",
    "transform_spec",
    setting="transform_name",
    metavar="NAME|module:attr",
    help="The recipe to measure: a preset (default, eval, bicubic, randaug, trivialaug, clip, "
    "eval-bicubic, timm-train, timm-eval, tutorial, tutorial-eval; see "
    "loaders/recipe/presets.py) built at --image-size, or module:attr naming a pipeline "
    "(torchvision v1 or v2, timm, albumentations: make_loader(transform=...)). The webdataset "
    "and imagefolder baselines then decode with torchvision.io and run the same pipeline.",
)
@click.option(
    "--exact-decode",
    is_flag=True,
    help="make_loader(scaled_decode=False): decode large JPEG regions at full scale (exact "
    "pixels) instead of at 1/2, 1/4 or 1/8.",
)
@library_option(
    BENCH,
    "--batches",
    type=click.IntRange(min=1),
    help="Batches per run [default: whole epochs].",
)
@library_option(BENCH, "--epochs", type=click.IntRange(min=1))
@library_option(
    BENCH,
    "--warmup",
    type=click.IntRange(min=0),
    help="Batches after the first one that are not timed.",
)
@click.option(
    "--world-size",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Measure one rank's share of a job of this size.",
)
@click.option("--rank", type=click.IntRange(min=0), default=0, show_default=True)
@library_option(
    BENCH,
    "--step-ms",
    type=click.FloatRange(min=0),
    help="Simulate a training step of this many ms per batch (a sleep) and report "
    "the share of time it waited for data (GPU idle %).",
)
@library_option(
    LOADER,
    "--label",
    metavar="cls|json:PATH|none",
    help="Where each sample's integer label is: the .cls member, a key path in its .json, or "
    "none (unlabeled data).",
)
@click.option(
    "--field",
    "fields",
    multiple=True,
    metavar="NAME=SPEC",
    help="Also deliver a field per sample (repeatable): SPEC is txt (text), json, json:PATH, or "
    "any member extension (bytes); e.g. --field caption=txt.",
)
@click.option(
    "--source",
    "mixture",
    multiple=True,
    metavar="URL=WEIGHT",
    help="Measure a mixture instead of SOURCE alone (repeatable): make_loader([Source(URL, "
    "weight=WEIGHT), ...]); with --compare plain, SOURCE alone runs interleaved with it.",
)
@library_option(
    LOADER,
    "--epoch-size",
    type=click.IntRange(min=1),
    help="Samples per epoch of the mixture [default: the sum of the sources' sizes].",
)
@library_option(
    BENCH,
    "--tokenize",
    metavar="FIELD",
    help="Run a stand-in tokenizer on a text field in the workers (whitespace words hashed to "
    "ids, padded to 32; delivered as FIELD_ids), as CLIP-style training would.",
)
@click.option(
    "--compare",
    multiple=True,
    metavar="imagefolder=PATH|webdataset|webdataset-fast|plain|threads|exact",
    help="Baselines run interleaved with the loader: torchvision ImageFolder + PIL on "
    "the source images; a plain upstream webdataset pipeline (PIL) on the same shards; "
    "webdataset-fast: that pipeline given wdstool's decoder and augmentation; plain: this "
    "loader reading image + .cls only (the cost of --label/--field/--tokenize); threads: this "
    "loader with --worker-mode thread; exact: this loader with the scaled decode off (what it "
    "gains on large images).",
)
@library_option(
    BENCH,
    "--memory",
    is_flag=True,
    help="Also report the peak PSS of the loader's whole process tree (main + workers), "
    "sampled every 2 s; each sample walks every process's page tables, which costs the run a "
    "little throughput, so take speed figures without it.",
)
@library_option(
    LOADER,
    "--worker-mode",
    type=click.Choice(["process", "thread"]),
    help="DataLoader worker processes, or decode threads in the loader's process "
    "(make_loader(worker_mode=...)).",
)
@library_option(
    BENCH,
    "--ceiling",
    "with_ceiling",
    is_flag=True,
    help="Also measure decode + augmentation alone in as many processes as workers (the "
    "loader's own per-sample work; with the partial JPEG decoder also the whole-image figure).",
)
@library_option(BENCH, "--repeats", type=click.IntRange(min=1))
@library_option(
    LOADER,
    "--cache-dir",
    type=click.Path(file_okay=False),
    help="Keep a local copy of remote shards here (shared by workers and ranks).",
)
@library_option(
    LOADER, "--cache-limit", type=BYTE_SIZE, help="Evict least recently used beyond this."
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write every figure and the configuration here.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a PNG: throughput vs workers and the wait-time histogram.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@storage_options_from_cli
def stream_bench_cmd(
    source: str,
    batch_size: int,
    workers: tuple[int, ...],
    prefetch_factor: int,
    image_size: int,
    output: str,
    channels_last: bool,
    eval_: bool,
    transform_spec: str,
    exact_decode: bool,
    batches: int | None,
    epochs: int,
    warmup: int,
    world_size: int,
    rank: int,
    step_ms: float,
    label: str,
    fields: tuple[str, ...],
    mixture: tuple[str, ...],
    epoch_size: int | None,
    tokenize: str | None,
    compare: tuple[str, ...],
    worker_mode: str,
    memory: bool,
    with_ceiling: bool,
    repeats: int,
    cache_dir: str | None,
    cache_limit: int | None,
    storage_options: dict[str, Any] | None,
    json_path: str | None,
    plot_path: str | None,
    quiet: bool,
) -> None:
    """Measure how fast the loader delivers batches from SOURCE, as a training loop feels it.

    Reports samples/s, MB/s (compressed), time to first batch, per-batch wait percentiles and
    spikes, idle share under a simulated step, CPU use and peak RSS, against baselines and the
    machine's decode+augment ceiling. Runs are interleaved and repeated; ratios are pairwise.

    SOURCE is anything make_loader reads, Parquet files too (a .parquet file, folder or glob,
    s3://, an https brace pattern, hf://datasets/ORG/NAME#SPLIT); the webdataset baselines
    need tar shards.
    """
    from tqdm import tqdm

    from loaders.bench.report import plot, render_text
    from loaders.bench.run import BenchConfig, run_stream_bench
    from loaders.recipe.presets import resolve_transform
    from wdstool.base.errors import ConfigError

    choice = resolve_transform(transform_spec, image_size)
    if eval_ and (choice.transform is not None or not choice.train):
        raise ConfigError(f"--eval with --transform {transform_spec}: give one of the two")

    imagefolder, webdataset, webdataset_fast = None, False, False
    plain = threads = exact = False
    for item in compare:
        if item == "plain":
            plain = True
        elif item == "threads":
            threads = True
        elif item == "exact":
            exact = True
        elif item == "webdataset":
            webdataset = True
        elif item == "webdataset-fast":
            webdataset_fast = True
        elif item.startswith("imagefolder="):
            imagefolder = item.split("=", 1)[1]
        else:
            raise ConfigError(
                f"--compare {item!r}: use imagefolder=PATH, webdataset, webdataset-fast, plain or "
                "exact"
            )
    weighted = []
    for item in mixture:
        url, sep, weight = item.rpartition("=")
        try:
            value = float(weight)
        except ValueError:
            value = -1.0
        if not sep or not url or not value > 0:
            raise ConfigError(f"--source {item!r}: write URL=WEIGHT with a weight > 0")
        weighted.append((url, value))
    loader: dict[str, Any] = {  # make_loader's keywords: the loader measured
        "batch_size": batch_size,
        "prefetch_factor": prefetch_factor,
        "output": output,
        "channels_last": channels_last,
        "world_size": world_size,
        "rank": rank,
        "label": None if label.lower() == "none" else label,
        "fields": dict(field_specs(fields)),
        "worker_mode": worker_mode,
        "epoch_size": epoch_size,
        "train": choice.train and not eval_,
        "transform": choice.transform,
        "scaled_decode": not exact_decode,
        "storage_options": storage_options,
        "cache_dir": cache_dir,
        "cache_limit": cache_limit,
    }
    if choice.transform is None:  # a transform has its own size (a preset's: --image-size)
        loader["image_size"] = image_size
    cfg = BenchConfig(
        source=source,
        loader=loader,
        workers=workers,
        batches=batches,
        epochs=epochs,
        warmup=warmup,
        step_ms=step_ms,
        tokenize=tokenize,
        plain=plain,
        threads=threads,
        memory=memory,
        sources=tuple(weighted),
        transform_name=transform_spec,
        exact=exact,
        imagefolder=imagefolder,
        webdataset=webdataset,
        webdataset_fast=webdataset_fast,
        with_ceiling=with_ceiling,
        repeats=repeats,
    )
    bar = tqdm(unit="batch", disable=not progress_enabled(quiet), file=sys.stderr, desc="bench")

    def on_run(r) -> None:
        bar.set_postfix_str(f"last: {r.name} w={r.workers} {r.samples_per_s:.0f}/s", refresh=False)

    try:
        report = run_stream_bench(cfg, on_batch=bar.update, on_run=on_run)
    finally:
        bar.close()
    click.echo("\n".join(render_text(report)))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
    if plot_path:
        plot(report, plot_path)
