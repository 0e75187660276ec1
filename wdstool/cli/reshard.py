"""``wdstool reshard``: WebDataset shards (ours or any tool's) -> one data set, new shard limits."""

from __future__ import annotations

import functools
from typing import Any

import click

from wdstool.cli.common import storage_options_from_cli
from wdstool.cli.defaults import library_option
from wdstool.cli.writing import options_from, print_summary, run_with_progress, write_options

OPTIONS = "shard_writer:ReshardOptions"  # reshard's and split's defaults


def selection_options(f: Any) -> Any:
    """Which samples reshard and split carry, and under which keys."""
    option = functools.partial(library_option, OPTIONS)
    for add in reversed(
        [
            option(
                "--keys",
                metavar="FILE",
                help="Carry only the samples whose keys this file lists (one key a line; a "
                "local path or URL). A key naming no sample is an error.",
            ),
            option(
                "--exclude-keys",
                metavar="FILE",
                help="Carry every sample but those whose keys this file lists (one key a "
                "line). A key naming no sample is an error.",
            ),
            option(
                "--dedupe",
                is_flag=True,
                help="Drop exact duplicates (same sha256 of the image member): the copy kept is "
                "the first in SRC order (SRC after SRC, shard after shard), with its own members "
                "(a later copy's .cls or .txt is not carried over: list first the SRC whose "
                "labels or captions you want); the others are listed in index.json 'skipped'. "
                "Reads every image once more.",
            ),
            option(
                "--rename-collisions",
                is_flag=True,
                help="A key already seen (in an earlier SRC, elsewhere in the same one, or in "
                "DEST with --append) becomes KEY_1 (KEY_2, ...) instead of an error naming both "
                "shards.",
            ),
        ]
    ):
        f = add(f)
    return f


def reshard_options(params: dict[str, Any]) -> Any:
    """ReshardOptions from the parsed options of reshard or split."""
    from shard_writer import ReshardOptions

    return options_from(ReshardOptions, params)


@click.command("reshard")
@click.argument("srcs", nargs=-1, required=True, type=str, metavar="SRC...")
@click.argument("dest", type=str)
@write_options(
    defaults="shard_writer:ReshardOptions",
    what="the sources' order (SRC after SRC, shard after shard)",
)
@selection_options
@library_option(
    OPTIONS,
    "--allow-mixed-members",
    is_flag=True,
    help="Merge SRCs that carry different members (.cls in one and not in another, .txt in "
    "one only: labelled with unlabelled data), which is otherwise refused naming them; the "
    "result then has samples without those members (read it with label=None, or fields "
    "that allow None).",
)
@storage_options_from_cli
def reshard_cmd(
    srcs: tuple[str, ...],
    dest: str,
    storage_options: dict[str, Any] | None,
    **params: Any,
) -> None:
    """Rewrite the samples of SRC... as one data set in DEST with new shard limits.

    \b
    Each SRC is one of
    - a data set (a folder or prefix holding index.json, or the manifest itself),
    - a folder or prefix of .tar shards written by any tool (webdataset's TarWriter,
      img2dataset, tar), in name order, or
    - a brace pattern (data-{000..099}.tar) or one shard's URL.
    Several SRCs are merged into one data set, SRC after SRC.

    Every member of every sample is carried byte for byte (an image re-encoded by
    --max-side/--quality aside), in the member order of its source, whatever it holds
    (.pyd and .npy members are copied as bytes, never unpickled). A sample whose members
    are split across two consecutive shards of a SRC is joined. A key found twice is an
    error naming both shards (or --rename-collisions). Data sets with class names must have
    the same classes (one list may extend the other), since .cls members are not rewritten.
    SRCs must agree on labels and captions: a SRC with .cls members and one without (or .txt
    in one only) is an error naming them, unless --allow-mixed-members.

    The same sources and options always give byte-identical shards, whatever --workers;
    an interrupted reshard finishes when run again; index.json is written last. --on-error
    defaults to raise here: skip lists a damaged or missing shard and keeps what was read
    before the damage. SRC and DEST may be local or any fsspec URL (s3://bucket/prefix).
    """
    from shard_writer import reshard

    options = reshard_options(params)
    summary = run_with_progress(
        params["quiet"],
        "reshard",
        lambda **report: reshard(
            list(srcs), dest, options, storage_options=storage_options, **report
        ),
    )
    print_summary(
        summary, as_json=params["as_json"], quiet=params["quiet"], verb="resharded", noun="samples"
    )
