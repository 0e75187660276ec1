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
rewritten manifest gets a new table. Manifests with per-sample offsets or interleaved facts have
no table (readers use the manifest itself).

``index.json`` stays the contract (the wids index). Beside a manifest of ``SIDE_MIN_SHARDS``
shards or more, ``pack`` and ``reshard`` (and ``--append``) also write its table as one file,
``index.shards.npz`` (:func:`side_bytes`, written before the manifest), which names the
manifest's fingerprint, shard and sample counts; a reader takes it only where the first bytes of
``index.json`` say the same (:func:`side_table`), so the host's first rank parses nothing either.
A manifest rewritten by another tool, or by hand, no longer matches and is parsed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wdstool.format.manifest import Manifest
from wdstool.format.sample_offsets import OffsetsFile

TABLE_VERSION = 2  # 2: meta names the offsets file (version 1's side files hold the same)
_READABLE_VERSIONS = (1, TABLE_VERSION)
_COLUMNS = ("nsamples", "filesize", "sha256", "names", "name_ends")
SIDE_NAME = "index.shards.npz"
SIDE_MIN_SHARDS = 10_000
HEAD_BYTES = 1 << 16  # how much of index.json holds its fingerprint and counts (ours: ~300 B)
_HEAD = {
    "fingerprint": re.compile(rb'"fingerprint":\s*"([0-9a-f]+)"'),
    "num_samples": re.compile(rb'"num_samples":\s*(\d+)'),
    "num_shards": re.compile(rb'"num_shards":\s*(\d+)'),
}


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

    @property
    def sample_offsets(self) -> OffsetsFile | None:
        raw = self.meta.get("sample_offsets")
        if raw is None:
            return None
        return OffsetsFile.from_json(raw, int(raw.get("samples", -1)), "shard table")


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
    if manifest.sample_offsets is not None:
        meta["sample_offsets"] = manifest.sample_offsets.to_json()
    return ShardTable(
        nsamples=np.asarray(sizes, dtype=np.int64),
        filesize=np.asarray(filesizes, dtype=np.int64),
        # no checksum anywhere (an index of someone else's shards): one byte a shard, not 64
        sha256=np.asarray(
            [(h or "").encode() for h in sha256s], dtype="S64" if any(sha256s) else "S1"
        ),
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
    return ShardTable(**cols, meta=meta) if _whole(cols, rows) else None


def _whole(cols: dict[str, Any], rows: int) -> bool:
    """Every column holds ``rows`` shards and the names end where the name buffer does."""
    if any(len(cols[c]) != rows for c in ("nsamples", "filesize", "sha256", "name_ends")):
        return False
    return not rows or int(cols["name_ends"][-1]) == len(cols["names"])


def side_bytes(manifest: Manifest) -> bytes | None:
    """The side file of ``manifest`` (an uncompressed ``.npz``), or None where it has none: under
    ``SIDE_MIN_SHARDS`` shards, no fingerprint, or shards with offsets or facts."""
    if len(manifest.shards) < SIDE_MIN_SHARDS or not manifest.fingerprint:
        return None
    table = table_of(manifest, manifest.fingerprint)
    if table is None:
        return None
    facts = {
        **table.meta,
        "table_version": TABLE_VERSION,
        "fingerprint": manifest.fingerprint,
        "num_samples": manifest.num_samples,
        "num_shards": len(manifest.shards),
    }
    buf = io.BytesIO()
    np.savez(buf, meta=np.array(json.dumps(facts)), **{c: getattr(table, c) for c in _COLUMNS})
    return buf.getvalue()


def head_facts(head: bytes) -> dict[str, str]:
    """The fingerprint and counts the first bytes of a manifest say (those it says)."""
    out = {}
    for name, pattern in _HEAD.items():
        m = pattern.search(head)
        if m:
            out[name] = m.group(1).decode()
    return out


def side_table(data: bytes, head: bytes) -> ShardTable | None:
    """The table of side file ``data`` where the manifest whose first bytes are ``head`` is the
    one it was written with (fingerprint, shards and samples); None otherwise, or where it is
    not a whole side file of this version."""
    facts = head_facts(head)
    if len(facts) != len(_HEAD):
        return None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            cols = {c: z[c] for c in _COLUMNS}
    except (OSError, ValueError, KeyError, EOFError, RuntimeError):
        return None
    if meta.get("table_version") not in _READABLE_VERSIONS or any(
        str(meta.get(k)) != v for k, v in facts.items()
    ):
        return None
    if not _whole(cols, int(facts["num_shards"])):
        return None
    if int(cols["nsamples"].sum()) != int(facts["num_samples"]):
        return None
    keep = {k: meta[k] for k in ("classes", "identity", "versions", "sample_offsets") if k in meta}
    return ShardTable(**cols, meta=keep)


__all__ = [
    "HEAD_BYTES",
    "SIDE_MIN_SHARDS",
    "SIDE_NAME",
    "TABLE_VERSION",
    "ShardTable",
    "head_facts",
    "load_table",
    "save_table",
    "side_bytes",
    "side_table",
    "table_key",
    "table_of",
]
