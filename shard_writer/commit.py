"""The second half of every write (pack, reshard, split): check DEST, write the shards that are
not complete yet, publish ``index.json`` last.

A command plans a :class:`Job` (its shard tasks, in order, and what its manifest records); this
module does the rest the same way for all of them: refuse a DEST holding another data set (or,
with ``--append``, one that is not a data set), reuse shards an interrupted run completed (their
markers, sizes and sha256 agree), run the other tasks on the engine, fsync, write the manifest
(for an append: every shard and one more version), remove the run's state.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from shard_writer.append import Added, Base, appended_manifest, prepare_append
from shard_writer.dest import STATE_DIR, Destination
from shard_writer.execute import Engine, execute
from shard_writer.options import PackSummary, ProgressFn, WriteOptions
from shard_writer.publish import prepare_dest, reusable, summary_from_manifest
from shard_writer.write import ShardOutcome
from wdstool.format.interleaved import InterleavedShard, totals
from wdstool.format.manifest import (
    MANIFEST_NAME,
    NO_VIDEOS,
    Manifest,
    ShardEntry,
    VideoTotals,
    build_manifest,
)
from wdstool.format.sample_offsets import OFFSETS_NAME, offsets_bytes, read_all, shards_digest
from wdstool.format.shard_table import SIDE_NAME, side_bytes


class NamedTask(Protocol):
    @property
    def name(self) -> str: ...

    def write(self, on_sample: Callable[[int], None] | None = None) -> ShardOutcome: ...


@dataclass(frozen=True, kw_only=True)
class Job:
    """A planned write: ``tasks`` in shard order, the layout's ``fingerprint``, and what the
    manifest records. ``base``: the data set an append adds to (None: a new data set)."""

    dest: Destination
    options: WriteOptions
    tasks: Sequence[NamedTask]
    fingerprint: str
    classes: tuple[str, ...]
    recorded: dict[str, Any]
    skipped: Sequence[dict[str, Any]]
    samples: int
    base: Base | None = None
    appended: str = ""  # for an append: the fingerprint of its input (SRC and options)
    command: str = "pack"
    inputs: tuple[str, ...] = ()
    next_key: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # merged into the summary
    videos: VideoTotals = NO_VIDEOS  # of the samples written (pack: from the probe)
    # samples of several images: each shard's facts for the manifest, by shard name
    interleaved: Mapping[str, InterleavedShard] = field(default_factory=dict)


def commit(
    job: Job,
    engine: Engine,
    started: float,
    progress: ProgressFn,
    on_total: Callable[[int, int, str], None] | None,
    phase: str = "pack",
) -> PackSummary:
    """Write ``job`` to its DEST and publish its manifest; the summary of what was done."""
    dest, names = job.dest, [t.name for t in job.tasks]
    if job.base is not None:
        if prepare_append(dest, job.base, job.fingerprint, job.appended, names):
            return summary_from_manifest(dest, job.base.manifest.to_json(), started, engine.workers)
    else:
        existing = prepare_dest(dest, job.fingerprint, job.options)
        if existing is not None:
            return summary_from_manifest(dest, existing, started, engine.workers)

    if on_total:
        on_total(job.samples, len(job.tasks), phase)
    done: dict[str, ShardOutcome] = {}
    todo = []
    for task in job.tasks:
        outcome = reusable(dest, task.name)
        if outcome is not None:
            done[task.name] = outcome
            progress(outcome.nsamples, outcome.source_bytes, 1)
        else:
            todo.append(task)
    reused = len(done)
    for outcome in execute(todo, engine.pool, engine.q, progress):
        done[outcome.name] = outcome

    outcomes = [done[name] for name in names]
    if job.base is None:
        manifest = build_manifest(
            [ShardEntry(o.name, o.nsamples, o.filesize, o.sha256) for o in outcomes],
            classes=job.classes,
            fingerprint=job.fingerprint,
            options=job.recorded,
            skipped=job.skipped,
            videos=job.videos,
            facts=[job.interleaved.get(o.name) for o in outcomes],
        )
    else:
        manifest = appended_manifest(
            job.base,
            Added(
                outcomes=outcomes,
                classes=job.classes,
                part=job.appended,
                skipped=job.skipped,
                command=job.command,
                inputs=job.inputs,
                next_key=job.next_key,
                options=job.recorded,
                videos=job.videos,
                interleaved=job.interleaved,
            ),
        )
    if job.options.sync:
        dest.sync(names)
    manifest = _write_offsets(dest, manifest, job.base, outcomes)
    side = side_bytes(manifest)  # a large data set's shard table, before the manifest it names
    if side is not None:
        dest.write_bytes(SIDE_NAME, side)
    elif dest.exists(SIDE_NAME):  # an earlier version's: it names another manifest
        dest.remove(SIDE_NAME)
    dest.write_bytes(MANIFEST_NAME, manifest.dumps())
    dest.remove(STATE_DIR)
    extra = dict(job.extra)
    if job.videos.count:
        extra["videos"] = job.videos.to_json()
    written = totals(job.interleaved.values())  # what this write holds
    if written is not None:
        extra["interleaved"] = written.to_json()
    if job.options.restart_markers:
        extra["restart_markers"] = restart_summary(outcomes)
    if manifest.versions:
        extra.update(
            version=manifest.versions[-1].number,
            dataset_shards=len(manifest.shards),
            dataset_samples=manifest.num_samples,
        )
    return PackSummary(
        dest=dest.display(),
        shards=len(outcomes),
        samples=sum(o.nsamples for o in outcomes),
        total_bytes=sum(o.filesize for o in outcomes),
        source_bytes=sum(o.source_bytes for o in outcomes),
        classes=len(job.classes),
        skipped=sorted((dict(s) for s in job.skipped), key=lambda s: s["path"]),
        reused_shards=reused,
        written_shards=len(todo),
        seconds=time.perf_counter() - started,
        workers=engine.workers,
        extra=extra,
    )


def _write_offsets(
    dest: Destination, manifest: Manifest, base: Base | None, outcomes: Sequence[ShardOutcome]
) -> Manifest:
    """Write every sample's offset beside the manifest (before it: the manifest names the file)
    and return the manifest that names it; an earlier file is removed where there is none.
    An append carries the data set's offsets over (unknown for shards packed without them)."""
    old: list[tuple[int, ...] | None] = []
    if base is not None:
        shards = base.manifest.shards
        of = base.manifest.sample_offsets
        data = dest.read_bytes(of.name) if of is not None else None
        if of is not None and data is not None and len(data) == of.span(of.samples, 0)[0]:
            old = read_all(data, of, [s.nsamples for s in shards])
        else:
            old = [None] * len(shards)
    written = offsets_bytes(
        [*old, *(o.offsets for o in outcomes)],
        [s.filesize for s in manifest.shards],
        [s.nsamples for s in manifest.shards],
        shards_digest(manifest.shards),
    )
    if written is None:
        if dest.exists(OFFSETS_NAME):  # an earlier version's: it names other shards
            dest.remove(OFFSETS_NAME)
        return manifest
    data, of = written
    dest.write_bytes(of.name, data)
    return dataclasses.replace(manifest, sample_offsets=of)


def restart_summary(outcomes: Sequence[ShardOutcome]) -> dict[str, Any]:
    """What ``restart_markers`` did over every shard: {"added": n, "kept": {reason: n}}."""
    total: Counter[str] = Counter()
    for o in outcomes:
        total.update(o.restarts)
    added = total.pop("added", 0)
    return {"added": added, "kept": dict(sorted(total.items()))}
