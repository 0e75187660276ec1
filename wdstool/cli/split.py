"""``wdstool split``: one data set -> DEST/<split>/ data sets by stable, key-hashed fractions."""

from __future__ import annotations

from typing import Any

import click

from wdstool.cli.common import emit_json, storage_options_from_cli
from wdstool.cli.reshard import reshard_options, selection_options
from wdstool.cli.writing import print_summary, run_with_progress, write_options


@click.command("split")
@click.argument("src", type=str)
@click.argument("dest", type=str)
@click.option(
    "--fractions",
    required=True,
    metavar="NAME=F,...",
    help="The splits and their shares, summing to 1, e.g. train=0.98,validation=0.02.",
)
@write_options(
    defaults="shard_writer:ReshardOptions", what="the source order within each split", append=False
)
@selection_options
@storage_options_from_cli
def split_cmd(
    src: str,
    dest: str,
    fractions: str,
    storage_options: dict[str, Any] | None,
    **params: Any,
) -> None:
    """Split SRC into one data set per split: DEST/<NAME>/ for each NAME=F of --fractions.

    A sample goes to the split a hash of (its key, --seed) picks, so the assignment is stable:
    a sample never changes split when the data set is resharded or appended to (split the new
    data with the same fractions and seed, and every old sample lands where it was). SRC is
    anything reshard reads (a data set, a folder of tars, a brace pattern); samples are carried
    byte for byte, as reshard carries them, and --keys, --exclude-keys and --dedupe choose them
    first. Each split is written like a reshard: shard limits, shuffle, resumable, index.json
    last. A split that would get no sample is an error.
    """
    from shard_writer import parse_fractions, split

    shares = parse_fractions(fractions)
    options = reshard_options(params)
    summaries = run_with_progress(
        params["quiet"],
        "split",
        lambda **report: split(
            src, dest, shares, options, storage_options=storage_options, **report
        ),
    )
    if params["as_json"]:
        emit_json({"splits": {name: s.to_json() for name, s in summaries.items()}})
        return
    for name, summary in summaries.items():
        print_summary(
            summary, as_json=False, quiet=params["quiet"], verb=name + ":", noun="samples"
        )
