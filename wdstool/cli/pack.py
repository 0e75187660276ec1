"""``wdstool pack``: an ImageFolder tree, a listing file or a split of Hub-style Parquet files ->
tar shards + index.json."""

from __future__ import annotations

from typing import Any

import click

from wdstool.cli.common import storage_options_from_cli
from wdstool.cli.defaults import library_option
from wdstool.cli.writing import options_from, print_summary, run_with_progress, write_options

OPTIONS = "shard_writer:PackOptions"  # the defaults of every option that has a setting there


@click.command("pack")
@click.argument("src", type=str)
@click.argument("dest", type=str)
@write_options(
    defaults=OPTIONS,
    what="the source order (ImageFolder order: class-sorted shards; a listing: its row order)",
)
@library_option(
    OPTIONS,
    "--verify-decode",
    is_flag=True,
    help="Fully decode every image (catches truncated data); by default only the "
    "header and end marker are checked. Videos are always probed with their first frame "
    "decoded.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Finish an interrupted pack (also what a plain rerun does): complete shards "
    "are kept after checking their size and sha256.",
)
@library_option(
    OPTIONS,
    "--path-column",
    metavar="NAME",
    help="Listing SRC: the column holding the image or video paths [default: path, else video].",
)
@library_option(
    OPTIONS,
    "--label-column",
    metavar="NAME",
    help="Listing SRC: the column holding labels (ints, or class names indexed in sorted "
    "order) [default: label, if there is one].",
)
@library_option(
    OPTIONS,
    "--caption-column",
    metavar="NAME",
    help="Listing SRC: the column holding captions, stored as KEY.txt in every sample (empty "
    "where a row has none) [default: caption, if there is one].",
)
@library_option(
    OPTIONS,
    "--images-column",
    metavar="NAME",
    help="JSON Lines or parquet listing of samples of several images: the list column naming "
    "each row's images (KEY.0.jpg, KEY.1.png, ...), beside a 'texts' list (OBELICS) or a "
    "caption/text column with <image> markers (LLaVA) [default: images, when the listing has "
    "no path column].",
)
@library_option(
    OPTIONS,
    "--key-column",
    metavar="NAME",
    help="Listing of conversations: the column whose values are the samples' keys (unique; "
    "characters other than letters, digits, - and _ become _) [default: id, where its values "
    "are unique; else the row's position].",
)
@library_option(
    OPTIONS,
    "--image-column",
    metavar="NAME",
    help="Parquet SRC with the images in a column (Hub style): the column holding them, as "
    '{"bytes", "path"} structs or raw bytes [default: image, when the file has no path '
    "column]. Streamed row group by row group.",
)
@library_option(
    OPTIONS,
    "--split",
    metavar="NAME",
    help="Parquet SRC holding several splits (train-00000-of-00004.parquet, "
    "test-00000-of-00001.parquet, or train/0000.parquet): the one to pack; the same as "
    "SRC#NAME.",
)
@storage_options_from_cli
def pack_cmd(src: str, dest: str, storage_options: dict[str, Any] | None, **params: Any) -> None:
    """Convert SRC into tar shards in DEST. SRC is one of

    \b
    - an ImageFolder tree: SRC/<class>/<image or video>, labels from the class folders
      (sorted, as torchvision's ImageFolder), or
    - a listing file: a .csv, .tsv, .json, .jsonl or .parquet file with one row per image or video.
      Columns: path (required, or video; relative to the listing's folder, absolute, or a URL),
      label (optional; ints, or class names indexed in sorted order), caption (optional;
      KEY.txt in every sample, empty where a row has none), any others (stored in KEY.json). Rows keep their order
      until the pack-time shuffle. --path-column, --label-column and --caption-column
      name other columns, or
    - Hub-style Parquet files holding the images: one file, or a whole split of them (a
      folder, a glob, an s3:// prefix, hf://datasets/ORG/NAME; SRC#SPLIT), see below.

    DEST gets PREFIX-000000.tar, ... and, last, index.json (a folder with index.json is a
    complete dataset). Samples: KEY.jpg (original bytes; extension from the real format),
    KEY.cls (class index, when labelled), KEY.txt (caption, with a caption column) and KEY.json
    (source path, class, width, height, and a listing's other columns): every sample of a
    data set carries the same members, as readers that infer columns from the first samples
    (Hugging Face datasets) need; images in several formats are a warning. The same input
    and options always give byte-identical shards. An interrupted pack is finished by
    running the same command again.

    Videos (.mp4 .webm .mkv .mov .m4v .avi; told apart from images by their bytes) are stored
    as they are, KEY.mp4 (or .webm, ...), never re-encoded; KEY.json adds "video": frames, fps,
    duration, keyframes, codec, audio. A video that does not probe (not a container, no video
    stream, truncated, first frame undecodable) is skipped like a bad image.

    DEST may be a local folder or any fsspec URL, e.g. s3://bucket/prefix: each shard is built
    locally, uploaded whole, checked (size and ETag), and index.json is uploaded last. SRC may
    be one too (a tree is listed once, recursively; images are read with ranged GETs).

    A JSON Lines or parquet listing whose rows each list several images (an 'images' list
    column, see --images-column) packs one sample per row: KEY.0.jpg, KEY.1.png, ... and
    KEY.json with "texts" and "images", two parallel lists (OBELICS style: a 'texts' list
    column; LLaVA style: a caption or text column whose <image> markers place the images).
    A row may have no image.

    A listing of conversations (a 'conversations' column, ShareGPT/LLaVA: [{"from": "human",
    "value": "<image>\\nWhat is it?"}, {"from": "gpt", ...}]; or a 'messages' column, the
    OpenAI/Hugging Face form: [{"role": "user", "content": ...}]) packs one sample per row,
    its conversation kept in KEY.json as "messages" (roles, turns, where each image goes) and
    its images (an 'image' path or list, or an 'images' list; one per <image> marker or image
    part) as KEY.0.jpg, ...; rows without an image are samples too. LLaVA's own .json files
    (a list of rows) are read as they are. Keys: the 'id' column where unique (--key-column).

    Hub-style Parquet (images as bytes in a column, see --image-column) is packed a whole
    split at once: SRC is a .parquet file, a folder of them (or of a data/ folder, as a Hub
    repository), a glob ('data/train-*.parquet'), an s3:// prefix or glob, or
    hf://datasets/ORG/NAME (a revision as NAME@REV, a folder after it; listed by the Hub API,
    HF_ENDPOINT); SRC#SPLIT or --split keeps one split (a source of several splits needs
    one). Keys are the loader's for
    the same rows, unique across the files: FILE-ROW (FILE: the file's path below the files'
    folder, ROW: the row in it, from 000000). The files are read row group by row group:
    --shuffle permutes the (file, row group) pairs and the rows within each; --no-shuffle keeps
    file order, then row order.

    --append adds SRC to the data set already in DEST as a new version (shards numbered on,
    keys numbered on, class names already there keep their indices); a loader over DEST reads
    every version, and `wdstool inspect DEST` lists them.
    """
    from shard_writer import PackOptions, pack

    options = options_from(PackOptions, params)
    summary = run_with_progress(
        params["quiet"],
        "pack",
        lambda **report: pack(src, dest, options, storage_options=storage_options, **report),
    )
    noun = (
        "samples" if summary.extra.get("videos") or summary.extra.get("interleaved") else "images"
    )
    print_summary(
        summary, as_json=params["as_json"], quiet=params["quiet"], verb="packed", noun=noun
    )
