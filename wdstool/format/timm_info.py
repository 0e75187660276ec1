"""timm's description of a webdataset data set (``_info.json``), from our manifests.

timm's webdataset reader (``timm.data.create_dataset("wds/NAME", root=ROOT, split=SPLIT)``,
``ReaderWds``) reads ``ROOT/_info.json`` (or ``info.json``)::

    {"splits": {SPLIT: {"name": SPLIT, "num_samples": N, "filenames": [...],
                        "shard_lengths": [...]}}}

with shard file names relative to ROOT (it joins them to ROOT), ``shard_lengths`` the samples
of each shard in the order of ``filenames``. Without it, timm knows no split ("split train not
found in info"). timm's training script asks for the splits ``train`` and ``validation`` by
default (``--train-split``, ``--val-split``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from wdstool.format.manifest import Manifest

TIMM_INFO_NAME = "_info.json"


def timm_split(name: str, folder: str, manifest: Manifest) -> dict[str, Any]:
    """The split ``name`` of the data set whose manifest sits in ``folder`` (relative to ROOT):
    its shards' file names relative to ROOT (absolute shard URLs stay as they are)."""
    filenames = [
        s.url if "://" in s.url or s.url.startswith("/") else f"{folder}/{s.url}"
        for s in manifest.shards
    ]
    return {
        "name": name,
        "num_samples": manifest.num_samples,
        "filenames": filenames,
        "shard_lengths": [s.nsamples for s in manifest.shards],
    }


def timm_info(splits: Mapping[str, dict[str, Any]]) -> bytes:
    """``_info.json`` for these splits: canonical JSON (sorted keys), the same bytes for the
    same data sets."""
    return (json.dumps({"splits": dict(splits)}, indent=2, sort_keys=True) + "\n").encode()
