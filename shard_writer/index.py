"""``wdstool index DEST --dali``: one DALI index file per shard of a packed dataset, from the
manifest and the tar headers alone.

Each shard is scanned header by header (``TarSampleReader.members``): a local shard is opened
unbuffered and every member's data is seeked past; a remote one is read through the retrying
streaming reader, which reads and discards data in place of short seeks. The scan is checked
against the manifest (file size, sample count) so an index never describes a shard that
changed since packing. Index files go next to the shards (``train-000000.idx`` beside
``train-000000.tar``) or under ``out``, keeping the shards' paths relative to the manifest;
each is written whole and atomically (temporary name + rename locally, one PUT remotely).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from typing import Any

from shard_writer.dest import Destination
from shard_writer.foreign_index import dataset_of
from wdstool.base.errors import DestinationError, ShardError
from wdstool.base.remote import open_shard
from wdstool.base.urls import is_remote
from wdstool.format.dali_index import DALI_INDEX_VERSION, DaliIndex, dali_index, dali_index_name
from wdstool.format.manifest import (
    Manifest,
    ManifestNotFound,
    ShardEntry,
    manifest_url_for,
    resolve_shard_url,
)
from wdstool.format.tar_read import TarSampleReader

log = logging.getLogger(__name__)
Progress = Callable[[int, int], object]  # (shards done, shards in all)


def scan_dali_index(
    url: str, entry: ShardEntry, storage_options: dict[str, Any] | None = None
) -> DaliIndex:
    """The DALI index of the shard at ``url``, from its headers, checked against ``entry``."""
    size_hint = entry.filesize if entry.filesize >= 0 else None
    try:
        f = open_shard(url, storage_options, size=size_hint, local_buffer=0)
        if is_remote(url):
            f.peek(1)  # remote shards open lazily: fail here, with this message, when missing
    except ShardError as exc:
        if not exc.message.endswith("shard not found") or entry.nsamples < 0:  # < 0: unlisted
            raise
        raise ShardError(f"{url}: shard listed in the manifest is missing") from None
    with f:
        members = list(TarSampleReader(f, url).members())
        size = f.seek(0, io.SEEK_END)
    for m in members:
        if m.data_offset + m.size > size:
            raise ShardError(
                f"{url}: truncated: member {m.name!r} ends at byte {m.data_offset + m.size}, "
                f"the file has {size} bytes"
            )
    if entry.filesize >= 0 and size != entry.filesize:
        raise ShardError(
            f"{url}: {size} bytes, the manifest says {entry.filesize} (the shard changed since "
            "it was packed: run `wdstool verify`)"
        )
    index = dali_index(members, url)
    if entry.nsamples >= 0 and index.samples != entry.nsamples:
        raise ShardError(f"{url}: {index.samples} samples, the manifest says {entry.nsamples}")
    return index


def index_location(base: str, shard: str, out: str | None) -> tuple[str, str]:
    """(folder URL, name under it) of the index of the manifest entry ``shard`` (``base`` "":
    no manifest, ``shard`` is the shard's own path)."""
    relative = base and "://" not in shard and not shard.startswith("/")
    if relative:
        return (out or base), dali_index_name(shard)
    folder, _, name = shard.rpartition("/")
    return (out or folder or "."), dali_index_name(name)


def _write(dest: Destination, name: str, text: str) -> None:
    try:
        dest.write_bytes(name, text.encode("utf-8", "surrogateescape"))
    except OSError as exc:
        raise DestinationError(
            f"{dest.display(name)}: cannot write the index file: {exc.strerror or exc}"
        ) from None


def write_dali_indexes(
    source: str,
    *,
    out: str | None = None,
    storage_options: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write one DALI index file per shard of the dataset at ``source`` (a folder or prefix
    holding ``index.json``, or the manifest's URL; or shards without one: a folder or prefix of
    ``.tar`` files, a brace pattern or one shard, whose index files go beside them). Returns a
    summary. Raises a one-line ShardError where there is neither, for a missing shard, or a
    shard that disagrees with the manifest; index files already written stay (each is
    complete), none is left half-written."""
    try:
        manifest, base = dataset_of(source, storage_options, count=False)
    except ManifestNotFound:
        raise ShardError(
            f"{manifest_url_for(source)}: no manifest found, and no .tar shards there (index a "
            "dataset packed by `wdstool pack`, a folder of .tar shards, or a shard)"
        ) from None
    where = manifest_url_for(source) if base else source
    plan = _plan(manifest, base, out, where)
    dests: dict[str, Destination] = {}
    written: list[str] = []
    samples = members = 0
    if progress is not None:
        progress(0, len(plan))
    for n, (entry, folder, name) in enumerate(plan):
        url = resolve_shard_url(base, entry.url)
        index = scan_dali_index(url, entry, storage_options)
        dest = dests.get(folder) or dests.setdefault(folder, Destination(folder, storage_options))
        _write(dest, name, index.text)
        written.append(dest.display(name))
        samples += index.samples
        members += index.members
        log.info("%s: %d samples indexed in %s", url, index.samples, dest.display(name))
        if progress is not None:
            progress(n + 1, len(plan))
    return {
        "manifest": where,
        "format": f"dali-webdataset-index {DALI_INDEX_VERSION}",
        "num_shards": len(plan),
        "num_samples": samples,
        "num_members": members,
        "index_files": written,
        "out": out,
    }


def _plan(
    manifest: Manifest, base: str, out: str | None, where: str
) -> list[tuple[ShardEntry, str, str]]:
    plan = []
    seen: dict[tuple[str, str], str] = {}
    for entry in manifest.shards:
        folder, name = index_location(base, entry.url, (out.rstrip("/") or out) if out else None)
        other = seen.setdefault((folder, name), entry.url)
        if other != entry.url:
            raise ShardError(
                f"{where}: shards {other!r} and {entry.url!r} would share the "
                f"index file {folder}/{name}"
            )
        plan.append((entry, folder, name))
    return plan
