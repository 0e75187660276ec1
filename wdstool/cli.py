"""The ``wdstool`` command line: thin click commands over the library.

Each command parses its options, calls one library function and renders the result. Domain
errors are WdsToolError (click exceptions): one line on stderr, non-zero exit.
Machine-readable output (``--json``) goes to stdout; progress and chatter go to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import click

from wdstool import __version__
from wdstool.params import BYTE_SIZE, format_size
from wdstool.storage import ScrubbingFilter


def _progress_enabled(quiet: bool) -> bool:
    return not quiet and sys.stderr.isatty()


def storage_options_from_cli(f):
    """``--endpoint-url`` and ``--anon``, passed to the command as ``storage_options``."""
    import functools

    @click.option(
        "--endpoint-url",
        default=None,
        metavar="URL",
        help="S3-compatible endpoint for s3:// URLs (default: AWS_ENDPOINT_URL_S3 / "
        "AWS_ENDPOINT_URL, else AWS). Credentials come from the usual AWS variables or profile.",
    )
    @click.option("--anon", is_flag=True, help="Unsigned S3 requests (public buckets).")
    @functools.wraps(f)
    def wrapper(*args, endpoint_url: str | None, anon: bool, **kwargs):
        options: dict[str, Any] = {}
        if endpoint_url:
            options["endpoint_url"] = endpoint_url
        if anon:
            options["anon"] = True
        return f(*args, storage_options=options or None, **kwargs)

    return wrapper


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="wdstool")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More log output on stderr (-vv debug, -vvv also SDK/HTTP internals; "
    "credentials are always scrubbed).",
)
def cli(verbose: int) -> None:
    """Pack image datasets into WebDataset shards and stream them into PyTorch.

    \b
    Typical use:
      wdstool sample-data data/images --images 2000 --classes 10
      wdstool pack data/images data/shards --max-count 1000
      wdstool inspect data/shards
      wdstool verify data/shards
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("wdstool: %(levelname)s: %(message)s"))
    handler.addFilter(ScrubbingFilter())  # credentials never reach a log line
    logging.basicConfig(level=level, handlers=[handler])
    if verbose < 3:  # SDK and HTTP internals only with -vvv
        for name in ("botocore", "aiobotocore", "urllib3", "s3fs", "fsspec", "aiohttp"):
            logging.getLogger(name).setLevel(max(level, logging.INFO))


@cli.command("sample-data")
@click.argument("dest", type=click.Path(file_okay=False))
@click.option(
    "--images",
    "-n",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="Number of images to write.",
)
@click.option(
    "--classes",
    "-c",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Number of class folders (class_000, class_001, ...).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same bytes.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Processes to use [default: usable cores].",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar, no summary.")
def sample_data_cmd(
    dest: str, images: int, classes: int, seed: int, workers: int | None, quiet: bool
) -> None:
    """Write a realistic ImageFolder tree of JPEGs to DEST.

    Images are cut from the real photographs that ship inside scikit-image, scikit-learn and
    matplotlib (no network), randomly cropped, rotated, flipped, colour-jittered and noised:
    about 450x380 px, JPEG quality 90, ~100 KB each, an ImageNet-like decode cost.
    """
    from shard_writer.sample_data import generate_sample_data

    summary = generate_sample_data(
        dest,
        images=images,
        classes=classes,
        seed=seed,
        workers=workers,
        progress=_progress_enabled(quiet),
    )
    if not quiet:
        click.echo(
            f"wrote {summary.images} images in {summary.classes} classes to {summary.root} "
            f"({format_size(summary.total_bytes)}, {summary.total_bytes / summary.images / 1e3:.0f} KB "
            f"per image, {summary.seconds:.1f} s)"
        )


@cli.command("pack")
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
    help="--no-shuffle keeps ImageFolder order (class-sorted shards).",
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
    as_json: bool,
    quiet: bool,
    storage_options: dict[str, Any] | None,
) -> None:
    """Convert the ImageFolder tree SRC (SRC/<class>/<image>) into tar shards in DEST.

    DEST gets PREFIX-000000.tar, ... and, last, index.json (a folder with index.json is a
    complete dataset). Samples: KEY.jpg (original bytes; extension from the real format),
    KEY.cls (class index) and KEY.json (source path, class, width, height). The same input
    and options always give byte-identical shards. An interrupted pack is finished by
    running the same command again.

    DEST may be a local folder or any fsspec URL, e.g. s3://bucket/prefix: each shard is built
    locally, uploaded whole, checked (size and ETag), and index.json is uploaded last. SRC may
    be one too (listed once, recursively; images read with ranged GETs).
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
    )
    bar = tqdm(
        total=0,
        unit="img",
        unit_scale=True,
        disable=not _progress_enabled(quiet),
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
        _emit_json(summary.to_json())
        return
    if quiet:
        return
    if summary.up_to_date:
        click.echo(
            f"{summary.dest}: already complete ({summary.shards} shards, "
            f"{summary.samples} samples); nothing to do"
        )
        return
    click.echo(
        f"packed {summary.samples} images in {summary.classes} classes into {summary.shards} "
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
            click.echo(f"    {s['path']}: {s['reason']}")
        if len(summary.skipped) > 20:
            click.echo(f"    ... and {len(summary.skipped) - 20} more (see index.json 'skipped')")


@cli.command("inspect")
@click.argument("source", type=str)
@click.option(
    "--keys",
    "nkeys",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="How many sample keys to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON on stdout.")
@storage_options_from_cli
def inspect_cmd(
    source: str, nkeys: int, as_json: bool, storage_options: dict[str, Any] | None
) -> None:
    """Show the shards, samples, classes and sizes of a packed dataset.

    SOURCE is a folder or prefix holding index.json, or the manifest's own path/URL.
    """
    from shard_writer.verify import inspect_dataset

    info = inspect_dataset(source, nkeys=nkeys, storage_options=storage_options)
    if as_json:
        _emit_json(info)
        return
    click.echo(f"dataset   {info['manifest']}")
    click.echo(
        f"shards    {info['num_shards']}  (samples per shard: min {info['min_samples']}, "
        f"max {info['max_samples']})"
    )
    click.echo(f"samples   {info['num_samples']}")
    click.echo(f"bytes     {format_size(info['total_bytes'])}")
    click.echo(
        f"classes   {len(info['classes'])}: {', '.join(info['classes'][:10])}"
        + (" ..." if len(info["classes"]) > 10 else "")
    )
    click.echo(f"skipped   {len(info['skipped'])} inputs at pack time")
    for s in info["shards"][:5]:
        click.echo(
            f"  {s['url']}  {s['nsamples']} samples  {format_size(s['filesize'])}  "
            f"sha256 {s['sha256'][:12]}"
        )
    if len(info["shards"]) > 5:
        click.echo(f"  ... {len(info['shards']) - 5} more shards")
    if info["sample_keys"]:
        click.echo("first keys: " + ", ".join(info["sample_keys"]))


@cli.command("verify")
@click.argument("source", type=str)
@click.option("--decode", is_flag=True, help="Also decode every image.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@storage_options_from_cli
def verify_cmd(
    source: str, decode: bool, as_json: bool, quiet: bool, storage_options: dict[str, Any] | None
) -> None:
    """Re-read every shard and check it against index.json.

    Checks sizes, sha256, tar structure, member layout (KEY.<image>, KEY.cls) and sample counts;
    with --decode every image is decoded. Exits non-zero naming the first bad shard.
    """
    from tqdm import tqdm

    from shard_writer.verify import verify_dataset

    bar = tqdm(
        total=None,
        unit="B",
        unit_scale=True,
        disable=not _progress_enabled(quiet),
        file=sys.stderr,
        desc="verify",
    )
    try:
        report = verify_dataset(
            source, decode=decode, on_bytes=bar.update, storage_options=storage_options
        )
    finally:
        bar.close()
    if as_json:
        _emit_json(report)
    else:
        click.echo(
            f"ok: {report['num_shards']} shards, {report['num_samples']} samples, "
            f"{format_size(report['total_bytes'])} verified"
            + (" (images decoded)" if decode else "")
        )


class WorkerList(click.ParamType):
    """'2' or '0,1,2,4': the worker counts to sweep."""

    name = "list"

    def convert(self, value, param, ctx):  # type: ignore[override]
        if isinstance(value, tuple):
            return value
        try:
            counts = tuple(int(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of integers", param, ctx)
        if not counts or min(counts) < 0:
            self.fail(f"{value!r}: worker counts must be >= 0", param, ctx)
        return counts


def _render_bench(report: dict) -> None:
    click.echo(
        f"{'pipeline':<15} {'workers':>7} {'samples/s':>10} {'MB/s':>7} {'1st batch':>9} "
        f"{'wait p50':>9} {'wait p99':>9} {'idle %':>7} {'efficiency':>10}"
    )
    for row in report["summary"]:
        eff = f"{row['efficiency']:.2f}" if "efficiency" in row else "-"
        click.echo(
            f"{row['pipeline']:<15} {row['workers']:>7} {row['samples_per_s']:>10.0f} "
            f"{row['mb_per_s']:>7.1f} {row['time_to_first_batch']:>8.2f}s "
            f"{row['wait_p50_ms']:>7.1f}ms {row['wait_p99_ms']:>7.1f}ms {row['idle_pct']:>7.1f} "
            f"{eff:>10}"
        )
    for row in report["summary"]:
        if row.get("worker_peak_rss_mb"):
            click.echo(
                f"memory per worker ({row['pipeline']}, {row['workers']} workers): peak RSS "
                f"{row['worker_peak_rss_mb']:.0f} MB, private "
                f"{row.get('worker_private_mb', 0):.0f} MB (the rest is shared with the main "
                "process after fork)"
            )
    for name, r in report["ratios"].items():
        click.echo(
            f"ratio {name}: median {r['median']:.2f} (range {r['min']:.2f}-{r['max']:.2f}, "
            f"{r['pairs']} pairs)"
        )
    for w, c in report["ceiling"].items():
        line = (
            f"ceiling ({w} process{'es' if w != '1' else ''}, decode+augment, no loader): "
            f"{c['samples_per_s']:.0f} samples/s"
        )
        if c.get("whole_image_samples_per_s"):
            line += f"; decoding whole images: {c['whole_image_samples_per_s']:.0f} samples/s"
        click.echo(line)
    if report.get("decoder") == "whole":
        click.echo(
            "decoder: whole images (loaders/_jpegcrop not built or WDSTOOL_PARTIAL_DECODE=0)"
        )
    rec = report.get("recommendation") or {}
    if rec:
        click.echo(
            f"recommendation: num_workers={rec['num_workers']}, "
            f"prefetch_factor={rec['prefetch_factor']}. {rec['why']}"
        )
    if report.get("interrupted"):
        click.echo("(interrupted: figures above cover the runs finished so far)")


def _plot_bench(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name in ("wdstool", "webdataset-fast", "webdataset", "imagefolder"):
        rows = [r for r in report["summary"] if r["pipeline"] == name]
        if rows:
            ax1.plot(
                [r["workers"] for r in rows], [r["samples_per_s"] for r in rows], "o-", label=name
            )
    if report["ceiling"]:
        ws = sorted(int(w) for w in report["ceiling"])
        ax1.plot(
            ws,
            [report["ceiling"][str(w)]["samples_per_s"] for w in ws],
            "k--",
            label="ceiling (decode+augment)",
        )
        whole = [report["ceiling"][str(w)].get("whole_image_samples_per_s") for w in ws]
        if all(whole):
            ax1.plot(ws, whole, ":", color="grey", label="ceiling, whole-image decode")
    ax1.xaxis.get_major_locator().set_params(integer=True)
    ax1.set_xlabel("DataLoader workers")
    ax1.set_ylabel("samples/s")
    ax1.set_title("throughput")
    ax1.legend()
    ours = [r for r in report["runs"] if r["name"] == "wdstool" and r["waits"]]
    if ours:
        best = max(ours, key=lambda r: r["samples_per_s"])
        ax2.hist(best["waits"], bins=40)
        ax2.set_title(f"wdstool wait per batch ({best['workers']} workers)")
        ax2.set_xlabel("ms")
        ax2.set_ylabel("batches")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


@cli.command("stream-bench")
@click.argument("source", type=str)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option(
    "--workers",
    type=WorkerList(),
    default="2",
    show_default=True,
    help="DataLoader workers; a list (0,1,2,4) runs a sweep.",
)
@click.option("--prefetch-factor", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--image-size", type=click.IntRange(min=8), default=224, show_default=True)
@click.option("--output", type=click.Choice(["uint8", "float"]), default="uint8", show_default=True)
@click.option(
    "--channels-last",
    is_flag=True,
    help="Batches in channels-last memory (make_loader(channels_last=True)), as channels-last "
    "models take them.",
)
@click.option(
    "--batches",
    type=click.IntRange(min=1),
    default=None,
    help="Batches per run [default: whole epochs].",
)
@click.option("--epochs", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
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
@click.option(
    "--step-ms",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Simulate a training step of this many ms per batch (a sleep) and report "
    "the share of time it waited for data (GPU idle %).",
)
@click.option(
    "--compare",
    multiple=True,
    metavar="imagefolder=PATH|webdataset|webdataset-fast",
    help="Baselines run interleaved with the loader: torchvision ImageFolder + PIL on "
    "the source images; a plain upstream webdataset pipeline (PIL) on the same shards; or "
    "webdataset-fast: that pipeline given wdstool's decoder and augmentation.",
)
@click.option(
    "--ceiling",
    "with_ceiling",
    is_flag=True,
    help="Also measure decode + augmentation alone in as many processes as workers (the "
    "loader's own per-sample work; with the partial JPEG decoder also the whole-image figure).",
)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Keep a local copy of remote shards here (shared by workers and ranks).",
)
@click.option(
    "--cache-limit", type=BYTE_SIZE, default=None, help="Evict least recently used beyond this."
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
    batches: int | None,
    epochs: int,
    warmup: int,
    world_size: int,
    rank: int,
    step_ms: float,
    compare: tuple[str, ...],
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
    """
    from tqdm import tqdm

    from loaders.stream_bench import BenchConfig, run_stream_bench
    from wdstool.errors import ConfigError

    imagefolder, webdataset, webdataset_fast = None, False, False
    for item in compare:
        if item == "webdataset":
            webdataset = True
        elif item == "webdataset-fast":
            webdataset_fast = True
        elif item.startswith("imagefolder="):
            imagefolder = item.split("=", 1)[1]
        else:
            raise ConfigError(
                f"--compare {item!r}: use imagefolder=PATH, webdataset or webdataset-fast"
            )
    cfg = BenchConfig(
        source=source,
        batch_size=batch_size,
        workers=workers,
        prefetch_factor=prefetch_factor,
        image_size=image_size,
        output=output,
        channels_last=channels_last,
        batches=batches,
        epochs=epochs,
        warmup=warmup,
        world_size=world_size,
        rank=rank,
        step_ms=step_ms,
        imagefolder=imagefolder,
        webdataset=webdataset,
        webdataset_fast=webdataset_fast,
        with_ceiling=with_ceiling,
        repeats=repeats,
        storage_options=storage_options,
        cache_dir=cache_dir,
        cache_limit=cache_limit,
    )
    bar = tqdm(unit="batch", disable=not _progress_enabled(quiet), file=sys.stderr, desc="bench")

    def on_run(r) -> None:
        bar.set_postfix_str(f"last: {r.name} w={r.workers} {r.samples_per_s:.0f}/s", refresh=False)

    try:
        report = run_stream_bench(cfg, on_batch=bar.update, on_run=on_run)
    finally:
        bar.close()
    _render_bench(report)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
    if plot_path:
        _plot_bench(report, plot_path)


def main() -> None:
    cli(prog_name="wdstool")


if __name__ == "__main__":
    main()
