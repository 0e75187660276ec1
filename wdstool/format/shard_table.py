"""A manifest's shards as arrays, kept once per host (the planning-at-scale issue).

Parsing a manifest of 1,000,000 shards (~150 MB of ``index.json``) into an object per shard
takes seconds and hundreds of megabytes; every rank of a job pays it at every start. A
:class:`ShardTable` holds what the loader needs of each shard as arrays (sample counts, file
sizes, checksums, and the shard names one after another in one byte buffer) plus the
manifest's data-set facts. It is written once per host to a folder in the cache
(:func:`save_table`, atomically: a folder renamed into place) and memory-mapped by every later
reader (:func:`load_table`): the pages are shared between the ranks of a host.

The folder's name is a key of the manifest's URL and version (:func:`table_key`: size and
mtime of a local file, size and ETag of an S3 object; ``wdstool.base.s3.object_version``), so a
rewritten manifest gets a new table. ``index.json`` stays the contract: the table is a cache of
it, never written beside it. Manifests with per-sample offsets or interleaved facts have no
table (readers use the manifest itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wdstool.format.manifest import Manifest

TABLE_VERSION = 1
_COLUMNS = ("nsamples", "filesize", "sha256", "names", "name_ends")


@dataclass(frozen=True, eq=False)
class ShardTable:
    """Shard ``i``: ``nsamples[i]`` samples, ``filesize[i]`` bytes (-1: not known), checksum
    ``sha256[i]`` (b"": none), name ``names[name_ends[i-1]:name_ends[i]]`` (UTF-8, as the
    manifest writes it: relative to its folder, or a URL). ``meta``: ``classes``, ``identity``
    (the data set's), ``versions`` (earlier versions: identity, shards, samples)."""

    nsamples: np.ndarray
    filesize: np.ndarray
    sha256: np.ndarray
    names: np.ndarray
    name_ends: np.ndarray
    meta: dict[str, Any]

    def __len__(self) -> int:
        return len(self.nsamples)

    def name(self, i: int) -> str:
        if i < 0:
            i += len(self)
        a = int(self.name_ends[i - 1]) if i else 0
        return bytes(self.names[a : int(self.name_ends[i])]).decode()

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(self.meta.get("classes", ()))

    @property
    def identity(self) -> str:
        return str(self.meta["identity"])

    @property
    def versions(self) -> tuple[tuple[str, int, int], ...]:
        return tuple((str(a), int(b), int(c)) for a, b, c in self.meta.get("versions", ()))


def table_of(manifest: Manifest, identity: str) -> ShardTable | None:
    """``manifest``'s table (None where a shard has per-sample offsets or interleaved facts:
    those stay in the manifest)."""
    if manifest.facts and any(f is not None for f in manifest.facts):
        return None
    shards = manifest.shards
    if any(s.offsets is not None for s in shards):
        return None
    urls, sizes, filesizes, sha256s, _ = zip(*shards, strict=True) if shards else ((),) * 5
    encoded = [u.encode() for u in urls]
    names = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
    meta = {
        "classes": list(manifest.classes),
        "identity": identity,
        "versions": [[v.identity, v.shards, v.samples] for v in manifest.versions[:-1]],
    }
    return ShardTable(
        nsamples=np.asarray(sizes, dtype=np.int64),
        filesize=np.asarray(filesizes, dtype=np.int64),
        sha256=np.asarray([(h or "").encode() for h in sha256s], dtype="S64"),
        names=names,
        name_ends=ends,
        meta=meta,
    )


def table_key(url: str, version: str) -> str:
    """The cache folder's name for the manifest at ``url`` in ``version``."""
    text = f"{TABLE_VERSION}\0{url}\0{version}"
    return "table-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def save_table(table: ShardTable, folder: Path) -> None:
    """Write ``table`` as ``folder`` (created whole or not at all; a folder another process
    put there first is kept). Errors writing (a full or read-only cache) are not raised: the
    table is a cache."""
    folder = Path(folder)
    if folder.exists():
        return
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError:
        return
    try:
        for col in _COLUMNS:
            np.save(tmp / f"{col}.npy", np.ascontiguousarray(getattr(table, col)))
        (tmp / "meta.json").write_text(json.dumps({**table.meta, "rows": len(table)}))
        os.rename(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def load_table(folder: Path) -> ShardTable | None:
    """The table kept in ``folder``, its arrays memory-mapped; None where there is none or it
    is not whole (then it is rebuilt from the manifest)."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / "meta.json").read_text())
        cols = {c: np.load(folder / f"{c}.npy", mmap_mode="r") for c in _COLUMNS}
    except (OSError, ValueError):
        return None
    rows = meta.pop("rows", -1)
    n = len(cols["nsamples"])
    if rows != n or any(len(cols[c]) != n for c in ("filesize", "sha256", "name_ends")):
        return None
    if n and int(cols["name_ends"][-1]) != len(cols["names"]):
        return None
    return ShardTable(**cols, meta=meta)


__all__ = ["TABLE_VERSION", "ShardTable", "load_table", "save_table", "table_key", "table_of"]
