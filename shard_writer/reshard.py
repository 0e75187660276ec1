"""``reshard``: one or more sets of WebDataset shards -> one data set with new shard limits.

Steps, as pack's: resolve the SRCs' shards (:mod:`shard_writer.tar_sources`) -> scan every
shard's headers (a task per shard on the engine) -> choose the samples and their keys (pure,
:mod:`shard_writer.reshard_plan`), refuse SRCs that carry different members unless asked
(:mod:`shard_writer.reshard_members`) -> lay them out with pack's pure layout (limits, seeded
shuffle) -> write the shards that are not complete yet and ``index.json`` last
(:mod:`shard_writer.copy`, :mod:`shard_writer.commit`). The output depends only on the sources
and the options recorded in the manifest, never on ``--workers``; an interrupted reshard
finishes on rerun; ``--append`` adds the result to the data set in DEST as a new version.

:func:`plan_reshard` (everything up to the layout) is shared with ``split``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from shard_writer.append import Base, read_base
from shard_writer.commit import Job, commit
from shard_writer.copy import CopyTask
from shard_writer.dest import Destination
from shard_writer.execute import absolute, engine
from shard_writer.keys import read_keys
from shard_writer.layout import group_samples, shard_name
from shard_writer.options import PackSummary, ProgressFn, ReshardOptions
from shard_writer.probe import EncodeOptions
from shard_writer.reshard_members import disagreement, refusal
from shard_writer.reshard_plan import Carried, Selecting, Selection, merge_source_classes, select
from shard_writer.tar_sources import ShardScan, SourceSet, resolve_srcs, scan_shard
from wdstool.base.errors import ConfigError, InputError, OnError
from wdstool.base.urls import local_path
from wdstool.format.manifest import resolve_shard_url

log = logging.getLogger(__name__)
_NUMBERED = re.compile(r"^([0-9]+)_")


@dataclass(frozen=True, kw_only=True)
class Planned:
    """The samples to write (in source order), where they come from, and what to record."""

    sets: tuple[SourceSet, ...]
    urls: tuple[str, ...]  # every source shard, SRC after SRC (DEST's own first for --append)
    selection: Selection
    classes: tuple[str, ...]
    recorded: dict[str, Any]  # options for index.json; "next_key": past every numbered key written
    appended: str = ""  # with DEST's own shards first (an append): the fingerprint of the input


def reshard(
    srcs: Sequence[str],
    dest_url: str,
    options: ReshardOptions | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
    on_total: Callable[[int, int, str], None] | None = None,
) -> PackSummary:
    """Reshard ``srcs`` (data sets, folders of tars, brace patterns; local or any fsspec URL)
    into one data set under ``dest_url``. ``on_total``/``progress`` as for pack (phases "scan",
    counting source shards, then "reshard", counting samples). One-line WdsToolErrors."""
    options = options or ReshardOptions()
    if not srcs:
        raise ConfigError("reshard needs at least one SRC")
    srcs = [absolute(s, options) for s in srcs]
    dest_url = absolute(dest_url, options)
    progress = progress or (lambda *_: None)
    with engine(options) as eng:
        started = time.perf_counter()
        dest = Destination(dest_url, storage_options)
        base = read_base(dest) if options.append else None
        own = None
        if base is not None:  # DEST's shards: their keys (and images, to dedupe) count
            urls = tuple(resolve_shard_url(dest.url, s.url) for s in base.manifest.shards)
            own = SourceSet(name=dest.display(), urls=urls, classes=base.manifest.classes)
        planned = plan_reshard(
            srcs,
            options,
            storage_options,
            eng.pool,
            progress,
            on_total,
            own,
            base.next_key if base is not None else 0,
            dest.url,
        )
        job = copy_job(planned, planned.selection.samples, dest, options, base)
        summary = commit(job, eng, started, progress, on_total, phase="reshard")
        return eng.finish(summary, "scan_shard")


def plan_reshard(
    srcs: Sequence[str],
    options: ReshardOptions,
    storage_options: dict[str, Any] | None,
    pool: Executor | None,
    progress: ProgressFn,
    on_total: Callable[[int, int, str], None] | None,
    own: SourceSet | None = None,
    next_key: int = 0,
    dest: str | None = None,
) -> Planned:
    """Resolve, scan and select: the samples a reshard of ``srcs`` carries (``own``: DEST's
    shards for an append, scanned first; ``next_key``: DEST's next key number; ``dest``: where
    the result goes, which must not hold a SRC's shards)."""
    how, key_lists = _selecting(options, storage_options)
    sets = resolve_srcs(list(srcs), storage_options)
    if dest is not None:
        _not_into_a_source(sets, dest)
    if own is not None:
        sets = [own, *sets]
    classes = merge_source_classes([(s.name, s.classes) for s in sets])  # before any scan
    unnamed = [s.name for s in sets if s.classes is None]
    if classes and unnamed:
        log.warning(
            "classes come from the data sets among the SRCs; %s has no index.json: its .cls "
            "members, if any, are carried as they are",
            ", ".join(unnamed),
        )
    urls = tuple(u for s in sets for u in s.urls)
    first_new = len(own.urls) if own is not None else 0
    if on_total:
        on_total(len(urls), 0, "scan")
    scans = _scan_all(urls, first_new, options, storage_options, pool, progress)
    mixed = disagreement(sets, scans)  # before keys: whether to merge at all (DEST's too)
    if mixed is not None and not options.allow_mixed_members:
        raise InputError(refusal(mixed))
    if mixed is not None:
        log.warning("the SRCs carry different members, merged as asked: %s", mixed)
    selection = select(sets, scans, urls, how, existing=1 if own is not None else 0)
    if not selection.samples:
        raise InputError(
            f"{', '.join(srcs)}: no samples to write"
            + (f" ({len(selection.skipped)} skipped)" if selection.skipped else "")
        )
    numbered = [int(m.group(1)) + 1 for c in selection.samples if (m := _NUMBERED.match(c.key))]
    next_key = max([*numbered, len(selection.samples), next_key])
    recorded = {**options.recorded(key_lists), "next_key": next_key}
    appended = ""
    if own is not None:
        appended = _input_fingerprint(options.recorded(key_lists), sets[1:], scans[first_new:])
    return Planned(
        sets=tuple(sets),
        urls=urls,
        selection=selection,
        classes=classes,
        recorded=recorded,
        appended=appended,
    )


def _input_fingerprint(
    recorded: dict[str, Any], sets: Sequence[SourceSet], scans: Sequence[ShardScan]
) -> str:
    """What an append adds, whatever DEST holds: options and every source sample's members."""
    h = hashlib.sha256(json.dumps(recorded, sort_keys=True).encode())
    for name, scan in zip(_source_names(sets), scans, strict=True):
        h.update(f"\1{name}\0{scan.damage}".encode("utf-8", "surrogateescape"))
        for f in scan.samples:
            h.update(f"\0{f.key}\0{f.piece.members}".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _source_names(sets: Sequence[SourceSet]) -> list[str]:
    """Every source shard as the fingerprints name it: SRC position and file name, in order
    (not its full URL, so disk and object store give the same fingerprint)."""
    return [
        f"{n}:{url.rstrip('/').rsplit('/', 1)[-1]}" for n, s in enumerate(sets) for url in s.urls
    ]


def _folder(url: str) -> str:
    url = url.rstrip("/")
    return url if "://" in url else os.path.abspath(local_path(url))


def _not_into_a_source(sets: Sequence[SourceSet], dest: str) -> None:
    """A SRC's shards in DEST would be overwritten (``overwrite``) or mixed with the result."""
    where = _folder(dest)
    for s in sets:
        for url in s.urls:
            if _folder(url).rsplit("/", 1)[0] == where:
                raise ConfigError(
                    f"{dest}: holds shards of SRC {s.name} ({url}); reshard into another "
                    "folder (use append=True to add to a data set)"
                )


def _selecting(
    options: ReshardOptions, storage_options: dict[str, Any] | None
) -> tuple[Selecting, dict[str, str | None]]:
    lists: dict[str, str | None] = {"keys": None, "exclude_keys": None}
    keys = exclude = None
    if options.keys is not None:
        keys, lists["keys"] = read_keys(options.keys, "keys", storage_options)
    if options.exclude_keys is not None:
        exclude, lists["exclude_keys"] = read_keys(
            options.exclude_keys, "exclude_keys", storage_options
        )
    how = Selecting(
        keys=keys,
        exclude=exclude,
        dedupe=options.dedupe,
        rename=options.rename_collisions,
        fail=options.on_error is OnError.RAISE,
    )
    return how, lists


def _scan_all(
    urls: Sequence[str],
    first_new: int,
    options: ReshardOptions,
    storage_options: dict[str, Any] | None,
    pool: Executor | None,
    progress: ProgressFn,
) -> list[ShardScan]:
    """Every shard's scan, in order (DEST's own shards, before ``first_new``, are read for
    their keys, and images only to dedupe against them)."""
    n = len(urls)
    args = (
        list(urls),
        list(range(n)),
        [storage_options] * n,
        [options.dedupe] * n,
        [options.encode if i >= first_new else EncodeOptions() for i in range(n)],
    )
    results = map(scan_shard, *args) if pool is None or n <= 1 else pool.map(scan_shard, *args)
    out = []
    for scan in results:
        out.append(scan)
        progress(1, 0, 0)
    return out


def copy_job(
    planned: Planned,
    samples: Sequence[Carried],
    dest: Destination,
    options: ReshardOptions,
    base: Base | None,
    skipped: Sequence[dict[str, Any]] | None = None,
) -> Job:
    """The write of ``samples`` (chosen from ``planned``) to ``dest``: pack's layout, one
    :class:`CopyTask` per shard, the fingerprint of it all."""
    groups = group_samples([c.need() for c in samples], options.layout)
    first = base.first_shard if base is not None else 0
    tasks = []
    for n, group in enumerate(groups):
        chosen = tuple(samples[i] for i in group)
        used = {p.shard for c in chosen for p in c.pieces}
        tasks.append(
            CopyTask(
                name=shard_name(options.prefix, first + n, first + len(groups)),
                dest_url=dest.url,
                storage_options=dest.storage_options,
                sources={s: planned.urls[s] for s in sorted(used)},
                samples=chosen,
                encode=options.encode,
            )
        )
    sel = planned.selection
    return Job(
        dest=dest,
        options=options,
        tasks=tasks,
        fingerprint=_fingerprint(planned, tasks),
        classes=planned.classes,
        recorded=planned.recorded,
        skipped=sel.skipped if skipped is None else skipped,
        samples=len(samples),
        base=base,
        appended=planned.appended,
        command="reshard",
        inputs=tuple(s.name for s in planned.sets[1 if base is not None else 0 :]),
        next_key=planned.recorded["next_key"],
        extra={"renamed": sel.renamed, "duplicates": sel.duplicates},
    )


def _fingerprint(planned: Planned, tasks: Sequence[CopyTask]) -> str:
    """What the shards are made of: options, classes, and per shard every sample's key and
    members (source shard by SRC position and name, offsets, sizes); the same whether the
    sources are read from disk or an object store."""
    names = _source_names(planned.sets)  # by source shard index
    h = hashlib.sha256(
        json.dumps({"options": planned.recorded, "classes": planned.classes}).encode()
    )
    for task in tasks:
        h.update(task.name.encode())
        for c in task.samples:
            h.update(
                f"\0{c.key}\0{c.image}\0{c.payload}\0{c.image_suffix}".encode(
                    "utf-8", "surrogateescape"
                )
            )
            for p in c.pieces:
                h.update(
                    f"\1{names[p.shard]}\0{p.start}\0{p.end}".encode("utf-8", "surrogateescape")
                )
                for suffix, off, size in p.members:
                    h.update(f"\2{suffix}\0{off}\0{size}".encode("utf-8", "surrogateescape"))
    return h.hexdigest()
