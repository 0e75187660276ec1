"""``wdstool index DEST --dali``: index files for other readers (DALI's webdataset reader)."""

from __future__ import annotations

import sys
from typing import Any

import click

from wdstool.base.errors import ConfigError
from wdstool.cli.common import emit_json, progress_enabled, storage_options_from_cli


@click.command("index")
@click.argument("dest", type=str)
@click.option(
    "--dali",
    is_flag=True,
    help="Write DALI webdataset index files (v1.2, what DALI's wds2idx writes), one per shard.",
)
@click.option(
    "--out",
    default=None,
    metavar="DIR",
    help="Write the index files under DIR (a folder or URL; shard paths relative to the "
    "manifest are kept) instead of next to the shards.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@storage_options_from_cli
def index_cmd(
    dest: str,
    dali: bool,
    out: str | None,
    as_json: bool,
    quiet: bool,
    storage_options: dict[str, Any] | None,
) -> None:
    """Write an index file per shard of a packed dataset, from index.json and the tar headers.

    DEST is a folder or prefix holding index.json, or the manifest's own path/URL. Only the tar
    headers are read (member data is skipped). With --dali, DEST/train-000000.idx is written
    next to DEST/train-000000.tar (or under --out DIR), for
    nvidia.dali.fn.readers.webdataset(paths=[...tar], index_paths=[...idx]). DALI opens index
    files as local files: for shards on S3, pass a local --out DIR.
    """
    if not dali:
        raise ConfigError("say which index to write: --dali (DALI webdataset index files)")
    from tqdm import tqdm

    from shard_writer.index import write_dali_indexes

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
