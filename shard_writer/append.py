"""``--append``: a new version of the data set in DEST, for ``pack`` and ``reshard``.

The new shards come after the last one (numbered on, ``PREFIX-<n>.tar``); old shards are never
touched, not even read (``reshard --append`` reads their headers to check keys). ``index.json``
is replaced last, atomically, with every shard and the version history
(:mod:`wdstool.format.versions`): the history a data set packed once lacks is started with
version 1 as its manifest describes it. An interrupted append finishes on rerun (its state in
``.wdstool-pack/`` holds the fingerprint of its layout); a rerun of a finished append adds
nothing (the last version records the fingerprint of its input: SRC and options, not where
they landed); an interrupted append of something else is cleaned up (the shards it published
are named in no manifest) before this one starts.

Labels: class names already in DEST keep their indices, new names get the next ones (in sorted
order), so every version's ``.cls`` means the same class.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shard_writer.dest import STATE_DIR, Destination
from shard_writer.publish import STATE_NAME
from shard_writer.write import ShardOutcome
from wdstool.base.errors import DestinationError, InputError, WdsToolError
from wdstool.format.interleaved import InterleavedShard
from wdstool.format.manifest import (
    MANIFEST_NAME,
    NO_VIDEOS,
    Manifest,
    ShardEntry,
    VideoTotals,
    manifest_from_json,
)
from wdstool.format.versions import Version

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Base:
    """The data set an append adds to: its manifest and history (version 1 made up from the
    manifest when it has none)."""

    manifest: Manifest
    versions: tuple[Version, ...]

    @property
    def first_shard(self) -> int:
        return len(self.manifest.shards)

    @property
    def next_key(self) -> int:
        return self.versions[-1].next_key


def _not_a_dataset(dest: Destination, why: str) -> DestinationError:
    return DestinationError(
        f"{dest.display()}: not a wdstool data set ({why}); append=True adds a version to one "
        "(drop append=True to create it)"
    )


def read_base(dest: Destination) -> Base:
    """The complete data set in ``dest``; a one-line DestinationError when there is none."""
    raw = dest.read_json(MANIFEST_NAME)
    if raw is None:
        if dest.exists(MANIFEST_NAME):
            raise _not_a_dataset(dest, "index.json is not valid JSON")
        raise _not_a_dataset(dest, "no index.json")
    try:
        manifest = manifest_from_json(raw, dest.display(MANIFEST_NAME))
    except WdsToolError as exc:
        raise _not_a_dataset(dest, exc.message) from None
    if not manifest.fingerprint or raw.get("format") != "wdstool-manifest":
        raise _not_a_dataset(dest, "index.json was not written by wdstool")
    versions = manifest.versions or (_first_version(dest, manifest),)
    return Base(manifest=manifest, versions=versions)


def _first_version(dest: Destination, manifest: Manifest) -> Version:
    """Version 1 as a manifest without history describes it (created: its index.json's time)."""
    info = dest.info(MANIFEST_NAME) or {}
    when = info.get("mtime") or info.get("LastModified") or info.get("created")
    if isinstance(when, int | float):
        when = datetime.datetime.fromtimestamp(when, datetime.UTC)
    created = _iso(when) if isinstance(when, datetime.datetime) else None
    # pack numbers keys by input position: never past the samples plus the skipped inputs
    next_key = manifest.options.get("next_key", manifest.num_samples + len(manifest.skipped))
    return Version(
        number=1,
        identity=manifest.fingerprint,
        shards=len(manifest.shards),
        samples=manifest.num_samples,
        added_shards=len(manifest.shards),
        added_samples=manifest.num_samples,
        created=created,
        command=str(manifest.options.get("command", "pack")),
        part=manifest.fingerprint,
        next_key=int(next_key),
    )


def _iso(when: datetime.datetime) -> str:
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.astimezone(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def merge_classes(
    old: Sequence[str], new: Sequence[str], where: str
) -> tuple[tuple[str, ...], list[int]]:
    """(the data set's classes after the append, each new class's index in them): old names
    keep their indices, new ones follow in sorted order. Names on one side and none on the
    other (integer labels) cannot be reconciled: InputError."""
    if not old and not new:
        return (), []
    if not old or not new:
        have, lack = ("DEST", "SRC") if old else ("SRC", "DEST")
        raise InputError(
            f"{where}: {have} labels samples by class name, {lack} does not (integer labels "
            "or none); an appended version must label its samples the way DEST does"
        )
    merged = list(old)
    merged += sorted(set(new) - set(old))
    index = {c: i for i, c in enumerate(merged)}
    return tuple(merged), [index[c] for c in new]


def identity_after(base: Base, part: str) -> str:
    """The data set's fingerprint once ``part`` (the fingerprint of what is added) is in it."""
    return hashlib.sha256(f"{base.manifest.fingerprint}\0{part}".encode()).hexdigest()


def prepare_append(
    dest: Destination, base: Base, layout: str, part: str, names: Sequence[str]
) -> bool:
    """Get DEST ready for an append of input ``part`` (its fingerprint: SRC and options) laid
    out as ``layout`` (the fingerprint of its shards) in shards ``names``; True when that input
    is already in DEST as one of its versions (a rerun after the manifest was written, or the
    same input again: nothing to do)."""
    if any(v.part == part for v in base.versions):
        dest.remove(STATE_DIR)  # a kill between index.json and this cleanup leaves it
        return True
    dest.ensure()
    state = dest.read_json(STATE_NAME) or {}
    listed = {s.url for s in base.manifest.shards}
    if state.get("fingerprint") != layout:
        markers = {n[: -len(".json")] for n in dest.listdir(STATE_DIR) if n.endswith(".tar.json")}
        for name in sorted(markers - listed):  # published by an interrupted append of another part
            log.info("removing %s: left by an interrupted append of other input", name)
            dest.remove(name)
            dest.remove(f"{STATE_DIR}/{name}.json")
    present = set(dest.listdir())
    for name in names:
        # an interrupted append (its state is there) may have published a shard and died before
        # its marker: that file is its own, rewritten; otherwise a file under a new name is not
        if name in listed or (name in present and not state):
            raise DestinationError(
                f"{dest.display(name)}: already exists and is not part of the data set; "
                "choose another prefix=, or move it away"
            )
    dest.write_bytes(STATE_NAME, json.dumps({"fingerprint": layout, "append": True}).encode())
    for name in dest.remove_stale_temps():
        log.info("removed stale temporary file %s", name)
    return False


@dataclass(frozen=True, kw_only=True)
class Added:
    """What an append adds, for its manifest."""

    outcomes: Sequence[ShardOutcome]
    classes: tuple[str, ...]
    part: str  # the fingerprint of the input (SRC and options)
    skipped: Sequence[dict[str, Any]]
    command: str
    inputs: tuple[str, ...]
    next_key: int
    options: dict[str, Any]
    videos: VideoTotals = NO_VIDEOS
    # samples of several images: each new shard's facts, by name
    interleaved: Mapping[str, InterleavedShard] = field(default_factory=dict)


def appended_manifest(base: Base, added: Added) -> Manifest:
    """The manifest of the data set with ``added``: every shard, the history with one more
    version (its skipped inputs tagged with it)."""
    old = base.manifest
    entries = [
        *old.shards,
        *(ShardEntry(o.name, o.nsamples, o.filesize, o.sha256) for o in added.outcomes),
    ]
    number = len(base.versions) + 1
    version = Version(
        number=number,
        identity=identity_after(base, added.part),
        shards=len(entries),
        samples=sum(e.nsamples for e in entries),
        added_shards=len(added.outcomes),
        added_samples=sum(o.nsamples for o in added.outcomes),
        created=_iso(datetime.datetime.now(datetime.UTC)),
        command=added.command,
        inputs=added.inputs,
        part=added.part,
        next_key=added.next_key,
        options=added.options,
    )
    skipped = [*old.skipped, *({**s, "version": number} for s in added.skipped)]
    return Manifest(
        shards=tuple(entries),
        classes=added.classes,
        fingerprint=version.identity,
        options=old.options,
        skipped=tuple(skipped),
        name=old.name,
        versions=(*base.versions, version),
        videos=old.videos.plus(added.videos),
        facts=_facts(old, added),
    )


def _facts(old: Manifest, added: Added) -> tuple[InterleavedShard | None, ...]:
    """Every shard's facts of samples of several images, old and added (() when none has)."""
    new = [added.interleaved.get(o.name) for o in added.outcomes]
    if not old.facts and not any(new):
        return ()
    return (*(old.facts or [None] * len(old.shards)), *new)
