"""``wdstool index ROOT --timm``: one ``ROOT/_info.json`` describing every data set packed in a
folder directly under ROOT, as timm's webdataset reader expects (:mod:`wdstool.format.timm_info`).

A split is a folder under ROOT holding our ``index.json`` (a wids shard index works too); its
name is the split's name, so ``wdstool pack IMAGES/train ROOT/train`` and ``wdstool pack
IMAGES/val ROOT/validation --prefix validation`` give timm its default ``train`` and
``validation`` splits. Only the manifests are read (their shard lists and sample counts); the
file is written whole (temporary name + rename, or one PUT).
"""

from __future__ import annotations

import logging
from typing import Any

from shard_writer.dest import Destination
from wdstool.base.errors import InputError, ShardError
from wdstool.base.s3 import read_object
from wdstool.format.manifest import MANIFEST_NAME, parse_manifest
from wdstool.format.timm_info import TIMM_INFO_NAME, timm_info, timm_split

log = logging.getLogger(__name__)


def _subfolders(dest: Destination) -> list[str]:
    """Names of the folders directly under ``dest`` (sorted)."""
    try:
        entries = dest.fs.ls(dest.root, detail=True)
    except FileNotFoundError:
        raise InputError(f"{dest.display()}: no such folder") from None
    except OSError as exc:
        raise InputError(f"{dest.display()}: cannot list the folder: {exc}") from None
    return sorted(
        str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
        for e in entries
        if e.get("type") == "directory"
    )


def write_timm_info(root: str, *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``ROOT/_info.json`` for the data sets in the folders directly under ``root`` (local
    or a URL). Returns a summary. A one-line error when ROOT holds no packed data set in a
    folder, or a manifest cannot be read; nothing is written then."""
    dest = Destination(root, storage_options)
    splits: dict[str, dict[str, Any]] = {}
    for name in _subfolders(dest):
        where = dest.display(f"{name}/{MANIFEST_NAME}")
        try:
            data = read_object(where, storage_options)
        except FileNotFoundError:
            continue  # a folder that is not a data set
        manifest = parse_manifest(data, where)
        if not manifest.shards:
            raise ShardError(f"{where}: the data set has no shards")
        splits[name] = timm_split(name, name, manifest)
        log.info("%s: split %r, %d samples", where, name, manifest.num_samples)
    if not splits:
        alone = dest.exists(MANIFEST_NAME)
        raise InputError(
            f"{dest.display()}: no packed data set in a folder under it"
            + (
                " (it holds one itself: timm's splits are folders under ROOT, e.g. "
                "ROOT/train and ROOT/validation; pack into those)"
                if alone
                else " (pack into ROOT/train, ROOT/validation, ...)"
            )
        )
    dest.write_bytes(TIMM_INFO_NAME, timm_info(splits))
    return {
        "info": dest.display(TIMM_INFO_NAME),
        "splits": {
            name: {"num_samples": s["num_samples"], "num_shards": len(s["filenames"])}
            for name, s in splits.items()
        },
    }
