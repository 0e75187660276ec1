"""The destination's side of a pack: refuse another dataset, reuse complete shards, and read
back a dataset that is already complete."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time

from shard_writer.dest import STATE_DIR, Destination
from shard_writer.layout import ShardSpec
from shard_writer.options import PackOptions, PackSummary, WriteOptions
from shard_writer.scan import Scan
from shard_writer.write import ShardOutcome, hash_file, marker_name
from wdstool.base.errors import DestinationError, ShardError
from wdstool.format.manifest import MANIFEST_NAME, manifest_from_json
from wdstool.format.tar_index import scan_shard

log = logging.getLogger(__name__)
STATE_NAME = f"{STATE_DIR}/state.json"


def fingerprint(scan: Scan, specs: tuple[ShardSpec, ...], options: PackOptions) -> str:
    """What the shards are made of: options, classes, and per sample its path, size, label and
    key, plus (from a listing) its caption and other columns. A DEST whose interrupted pack
    has another fingerprint holds a different dataset."""
    h = hashlib.sha256()
    h.update(json.dumps({"options": options.recorded(), "classes": scan.classes}).encode())
    for spec in specs:
        h.update(spec.name.encode())
        for f, key in zip(spec.samples, spec.keys, strict=True):
            h.update(
                f"\0{f.relpath}\0{f.size}\0{f.class_idx}\0{key}".encode("utf-8", "surrogateescape")
            )
            if f.caption or f.extra:  # never for an ImageFolder tree: its fingerprint is unchanged
                h.update(b"\1" + json.dumps([f.caption, f.extra]).encode("ascii"))
            if f.caption == "":  # an empty KEY.txt (older packs wrote none): other shard bytes
                h.update(b"\2")
    return h.hexdigest()


def _our_shard(name: str, prefix: str) -> bool:
    return name.startswith(f"{prefix}-") and name.endswith(".tar")


def prepare_dest(dest: Destination, fingerprint: str, options: WriteOptions) -> dict | None:
    """Refuse a DEST holding another dataset; return its manifest if it holds this one."""
    dest.ensure()
    manifest_raw = dest.read_json(MANIFEST_NAME)
    state = dest.read_json(STATE_NAME)
    ours = [n for n in dest.listdir() if _our_shard(n, options.prefix)]
    same = (manifest_raw or {}).get("fingerprint") == fingerprint or (state or {}).get(
        "fingerprint"
    ) == fingerprint
    foreign = manifest_raw is not None or state is not None or ours
    if options.overwrite and not same:
        dest.remove(MANIFEST_NAME)
        dest.remove(STATE_DIR)
        for name in ours:
            dest.remove(name)
        manifest_raw = None
    elif foreign and not same:
        what = (
            "a different dataset"
            if manifest_raw is not None
            else "an interrupted pack of a different source or options"
            if state is not None
            else f"shards named {options.prefix}-*.tar"
        )
        raise DestinationError(
            f"{dest.display()}: destination already holds {what}; "
            "use overwrite=True to replace it, or choose another DEST"
        )
    if manifest_raw is not None and manifest_raw.get("fingerprint") == fingerprint:
        return manifest_raw
    dest.write_bytes(STATE_NAME, json.dumps({"fingerprint": fingerprint}).encode())
    for name in dest.remove_stale_temps():
        log.info("removed stale temporary file %s", name)
    return None


def reusable(dest: Destination, name: str) -> ShardOutcome | None:
    """The outcome of shard ``name`` if an earlier run published it complete (its marker, size
    and sha256, or on an object store its ETag, agree); None if it must be written."""
    raw = dest.read_json(marker_name(name))
    if raw is None:
        return None
    try:
        outcome = ShardOutcome.from_json(raw)
    except (KeyError, TypeError, ValueError):
        return None
    if not dest.local:
        # an object store's PUT is atomic and the upload was checked (size, ETag) before the
        # marker was written: the same ETag now means the same bytes, without downloading them
        info = dest.info(name)
        if info is None or int(info["size"]) != outcome.filesize:
            return None
        if outcome.etag and info.get("ETag") == outcome.etag:
            return outcome
    elif dest.size(name) != outcome.filesize:
        return None
    if hash_file(dest, name) != (outcome.filesize, outcome.sha256):
        log.warning("%s: content differs from its marker; rewriting", dest.display(name))
        return None
    if outcome.offsets is None:  # a marker written before offsets were recorded: a local read
        with open(dest.path(name), "rb", buffering=0) as f:
            offsets = scan_shard(f, dest.display(name)).offsets
        if offsets is not None and len(offsets) == outcome.nsamples:
            outcome = dataclasses.replace(outcome, offsets=offsets)
    return outcome


def summary_from_manifest(
    dest: Destination, raw: dict, started: float, workers: int
) -> PackSummary:
    manifest = manifest_from_json(raw, dest.display(MANIFEST_NAME))
    for entry in manifest.shards:
        if dest.size(entry.url) != entry.filesize:
            raise ShardError(
                f"{dest.display(entry.url)}: missing or wrong size although index.json lists it; "
                "run `wdstool verify`, or pack again with overwrite=True"
            )
    return PackSummary(
        dest=dest.display(),
        shards=len(manifest.shards),
        samples=manifest.num_samples,
        total_bytes=manifest.total_bytes,
        source_bytes=0,
        classes=len(manifest.classes),
        skipped=list(manifest.skipped),
        reused_shards=len(manifest.shards),
        written_shards=0,
        seconds=time.perf_counter() - started,
        workers=workers,
        up_to_date=True,
        extra={"videos": manifest.videos.to_json()} if manifest.videos.count else {},
    )
