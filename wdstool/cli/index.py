"""``wdstool index DEST --dali`` / ``wdstool index ROOT --timm``: index files for other readers
(DALI's webdataset reader; timm's ``_info.json``); ``wdstool index SOURCE... --out DIR`` (or
``PATH.json``): an index of shards you cannot write next to (someone else's, on the web, the
Hub or a bucket: counted from img2dataset's side files or the tars' headers)."""

from __future__ import annotations

import sys
from typing import Any

import click

from wdstool.base.errors import ConfigError
from wdstool.base.params import format_size
from wdstool.cli.common import emit_json, progress_enabled, storage_options_from_cli
from wdstool.cli.defaults import library_option

OPTIONS = "shard_writer:IndexOptions"


@click.command("index")
@click.argument("sources", nargs=-1, required=True, type=str)
@click.option(
    "--dali",
    is_flag=True,
    help="Write DALI webdataset index files (v1.2, what DALI's wds2idx writes), one per shard.",
)
@click.option(
    "--timm",
    is_flag=True,
    help="Write ROOT/_info.json for timm's webdataset reader: one split per data set packed in a "
    "folder directly under ROOT, named after that folder.",
)
@click.option(
    "--out",
    default=None,
    metavar="DIR",
    help="--dali: write the index files under DIR (a folder or URL; shard paths relative to "
    "the manifest are kept) instead of next to the shards. Without --dali/--timm: the index "
    "file to write (PATH.json, a path or URL) for the shards of SOURCES.",
)
@library_option(
    OPTIONS,
    "--count-by",
    type=click.Choice(["auto", "side-files", "scan"]),
    help="--out DIR: how shards are counted. auto: from img2dataset's side files "
    "(NAME.parquet, NAME_stats.json) where a shard has them, else from its tar's headers; "
    "side-files: a shard without them is an error; scan: every tar's headers.",
)
@library_option(
    OPTIONS,
    "--check",
    type=click.IntRange(min=-1),
    help="--out DIR: tars scanned to check that their side files describe them (a seeded "
    "sample; -1: every tar). A shard whose side files and tar disagree is an error naming it.",
)
@library_option(
    OPTIONS, "--batch", type=click.IntRange(min=1), help="--out DIR: shards a work item."
)
@library_option(
    OPTIONS,
    "--engine",
    type=click.Choice(["local", "ray"]),
    help="--out DIR: local: --workers work items at a time in threads. ray: a Ray task each "
    "(pip install -e '.[ray]'), on --ray-address's cluster (else RAY_ADDRESS, else a local "
    "instance on 127.0.0.1); SOURCES and DIR must be reachable from every node.",
)
@library_option(
    OPTIONS,
    "--workers",
    type=click.IntRange(min=1),
    help="--out DIR: work items at once (local), or CPUs of a local Ray instance.",
)
@click.option(
    "--ray-address", metavar="HOST:PORT", default=None, help="--engine ray: join this cluster."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@storage_options_from_cli
def index_cmd(
    sources: tuple[str, ...],
    dali: bool,
    timm: bool,
    out: str | None,
    count_by: str,
    check: int,
    batch: int,
    engine: str,
    workers: int,
    ray_address: str | None,
    as_json: bool,
    quiet: bool,
    storage_options: dict[str, Any] | None,
) -> None:
    """Write index files that other readers need next to packed data sets.

    --dali: DEST is a folder or prefix holding index.json, or the manifest's own path/URL. Only
    the tar headers are read (member data is skipped). DEST/train-000000.idx is written next to
    DEST/train-000000.tar (or under --out DIR), for
    nvidia.dali.fn.readers.webdataset(paths=[...tar], index_paths=[...idx]). DALI opens index
    files as local files: for shards on S3, pass a local --out DIR.

    --timm: DEST is a ROOT folder whose sub-folders are packed data sets (ROOT/train,
    ROOT/validation, ... each with its index.json); ROOT/_info.json then describes each as a
    split named after its folder (shard names relative to ROOT, sample counts from the
    manifests), for timm.data.create_dataset("wds/NAME", root=ROOT, split="train") and timm's
    train.py --dataset wds/NAME --data-dir ROOT (its default splits: train, validation).

    Without --dali/--timm, SOURCES are shards you cannot write next to (a brace pattern, a
    folder or prefix of .tar files, an index: someone else's data set on a web server, the
    Hugging Face Hub or a bucket). --out DIR (a folder or prefix) gets their index at any
    scale: index.json (wids' shard index: counts and sizes), index.shards.npz (the same as
    arrays, from 10,000 shards) and index.offsets.npy (each sample's offset, where the headers
    were read). Counts come from img2dataset's side files where a shard has them (its
    NAME.parquet's key and status columns, by ranged reads, checked against NAME_stats.json
    and, for --check tars, against the tar), else from the tar's headers; the work runs in
    batches (--engine ray: on a cluster), and a run killed part way goes on where it stopped.
    --out PATH.json writes one JSON file instead, each sample's offset in it (headers only).
    make_loader(DIR or PATH.json) then starts without reading a shard to count it.

    \b
    Example:
      wdstool pack images/train data/train
      wdstool pack images/val data/validation --prefix validation
      wdstool index data --timm
      wdstool index 'https://host/ds/train-{0000..0099}.tar' --out ds-index.json
      wdstool index s3://bucket/laion-shards/ --out s3://bucket/laion-index --engine ray
    """
    if not dali and not timm:
        if out is None:
            raise ConfigError(
                "say which index to write: --dali (DALI webdataset index files, one per "
                "shard), --timm (ROOT/_info.json for timm), or --out PATH.json (an index of "
                "the shards of SOURCES)"
            )
        if out.endswith(".json"):
            _foreign(list(sources), out, as_json, quiet, storage_options)
            return
        from shard_writer import IndexOptions

        options = IndexOptions(
            count_by=count_by,  # type: ignore[arg-type]
            check=check,
            batch=batch,
            engine=engine,
            workers=workers,
            ray_address=ray_address,
        )
        _folder(list(sources), out, options, as_json, quiet, storage_options)
        return
    if dali and timm:
        raise ConfigError("--dali or --timm, not both")
    if len(sources) != 1:
        raise ConfigError("--dali and --timm take one DEST (a data set or a ROOT of them)")
    dest = sources[0]
    if timm:
        _timm(dest, out, as_json, storage_options)
        return
    from tqdm import tqdm

    from shard_writer import write_dali_indexes

    bar = tqdm(
        total=None,
        unit="shard",
        disable=not progress_enabled(quiet),
        file=sys.stderr,
        desc="index",
    )

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        summary = write_dali_indexes(
            dest, out=out, storage_options=storage_options, progress=progress
        )
    finally:
        bar.close()
    if as_json:
        emit_json(summary)
        return
    files = summary["index_files"]
    click.echo(
        f"wrote {len(files)} DALI index files ({summary['num_samples']} samples, "
        f"{summary['num_members']} members) " + (f"under {out}" if out else "next to the shards")
    )
    if files:
        click.echo(f"  {files[0]}" + (f" ... {files[-1]}" if len(files) > 1 else ""))


def _foreign(
    sources: list[str],
    out: str,
    as_json: bool,
    quiet: bool,
    storage_options: dict[str, Any] | None,
) -> None:
    from tqdm import tqdm

    from shard_writer import write_foreign_index

    bar = tqdm(
        total=None, unit="shard", disable=not progress_enabled(quiet), file=sys.stderr, desc="index"
    )

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        summary = write_foreign_index(
            sources, out, storage_options=storage_options, progress=progress
        )
    finally:
        bar.close()
    if as_json:
        emit_json(summary)
        return
    click.echo(
        f"wrote {out}: {summary['num_shards']} shards, {summary['num_samples']} samples, "
        f"with each sample's offset"
    )


def _folder(
    sources: list[str],
    out: str,
    options: Any,
    as_json: bool,
    quiet: bool,
    storage_options: dict[str, Any] | None,
) -> None:
    from tqdm import tqdm

    from shard_writer import write_index_folder

    bar = tqdm(
        total=None, unit="shard", disable=not progress_enabled(quiet), file=sys.stderr, desc="count"
    )

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        summary = write_index_folder(
            sources, out, options, storage_options=storage_options, progress=progress
        )
    finally:
        bar.close()
    if as_json:
        emit_json(summary)
        return
    by = summary["counted_by"]
    click.echo(
        f"wrote {summary['index']}: {summary['num_shards']:,} shards, "
        f"{summary['num_samples']:,} samples ({by['side_files']:,} counted from img2dataset's "
        f"side files, {by['headers']:,} by their tar headers; {summary['checked']:,} tars "
        f"checked against their side files) in {summary['seconds']:.1f} s, "
        f"{summary['requests']:,} requests and {format_size(summary['bytes_read'])} read on the store"
    )
    for name, size in summary["files"].items():
        click.echo(f"  {name}: {format_size(size)}")


def _timm(
    root: str, out: str | None, as_json: bool, storage_options: dict[str, Any] | None
) -> None:
    if out is not None:
        raise ConfigError("--out applies to --dali; timm reads _info.json from ROOT itself")
    from shard_writer import write_timm_info

    summary = write_timm_info(root, storage_options=storage_options)
    if as_json:
        emit_json(summary)
        return
    click.echo(f"wrote {summary['info']}")
    for name, split in summary["splits"].items():
        click.echo(
            f"  split {name}: {split['num_samples']} samples in {split['num_shards']} shards"
        )
