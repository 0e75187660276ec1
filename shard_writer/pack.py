"""``pack``: ImageFolder tree or listing -> shards + ``index.json``, in parallel, resumable,
reproducible.

Steps: scan SRC (walk the tree, or read the listing) -> probe every image or video (measuring
re-encoded image sizes; a video's facts) -> pure layout -> check DEST -> write the shards
not already complete (process pool) -> write ``index.json`` last (:mod:`shard_writer.commit`;
``--append``: :mod:`shard_writer.append`). A shard is complete when its
final file exists and its size and sha256 equal what its marker (written right after
publishing) recorded; anything else is rewritten. Output bytes depend only on the input and on
the options recorded in the manifest, never on the number of workers.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shard_writer.append import Base, merge_classes, read_base
from shard_writer.commit import Job, commit
from shard_writer.dest import Destination
from shard_writer.execute import Engine, absolute, engine
from shard_writer.hub import HubScan, HubShardTask, hub_order, hub_scan, probe_hub
from shard_writer.interleaved import InterleavedScan
from shard_writer.interleaved_write import docs_job
from shard_writer.layout import Numbering, plan_layout
from shard_writer.listing import scan_source
from shard_writer.members import mixed_image_members, video_totals
from shard_writer.options import PackOptions, PackSummary, ProgressFn
from shard_writer.probe import probe_files
from shard_writer.publish import fingerprint
from shard_writer.scan import Scan, SourceFile
from shard_writer.write import ShardTask
from wdstool.base.errors import ConfigError, InputError, OnError

log = logging.getLogger(__name__)
__all__ = ["PackOptions", "PackSummary", "pack"]


def pack(
    src: str,
    dest_url: str,
    options: PackOptions | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
    on_total: Callable[[int, int, str], None] | None = None,
) -> PackSummary:
    """Pack ``src`` (an ImageFolder tree, or a listing file: a .csv, .tsv, .json, .jsonl or .parquet
    file naming one image or video per row) into shards and ``index.json`` under ``dest_url``; with
    ``options.append``, as a new version of the data set already there.

    Parquet files holding the images (Hub style: a file, folder, glob, ``s3://`` prefix or
    ``hf://datasets/ORG/NAME``, ``#SPLIT`` or ``options.split`` keeping one split) are packed
    a whole split at once, keyed as the loader keys their rows (:mod:`shard_writer.hub`).

    A listing whose rows each list several images (``options.images_column``) packs one
    sample per row, its images ``KEY.0.jpg``, ``KEY.1.png``, ... (:mod:`shard_writer.interleaved`).

    ``on_total(items, shards, phase)`` announces each phase ("probe", then "pack");
    ``progress(samples, source bytes, shards)`` reports increments within it. Raises WdsToolError subclasses with one-line messages.
    """
    options = options or PackOptions()
    src, dest_url = absolute(src, options), absolute(dest_url, options)
    with engine(options) as eng:
        summary = _pack(src, dest_url, options, eng, storage_options, progress, on_total)
        return eng.finish(summary, "_probe_chunk")


def _pack(
    src: str,
    dest_url: str,
    options: PackOptions,
    eng: Engine,
    storage_options: dict[str, Any] | None,
    progress: ProgressFn | None,
    on_total: Callable[[int, int, str], None] | None,
) -> PackSummary:
    progress = progress or (lambda *_: None)
    started = time.perf_counter()
    scan = hub_scan(
        src, options, storage_options, on_total=on_total, progress=lambda n: progress(n, 0, 0)
    ) or scan_source(src, options.columns, storage_options)
    if options.on_error is OnError.RAISE and scan.problems:
        p = scan.problems[0]
        raise InputError(f"{os.path.join(scan.root, p.path)}: {p.reason}")
    if not scan.files and not (isinstance(scan, InterleavedScan) and scan.docs):
        raise InputError(
            f"{scan.root}: no images or videos found (extensions: .jpg .jpeg .png .webp ... "
            ".mp4 .webm .mkv .mov .m4v .avi)"
        )
    dest = Destination(dest_url, storage_options)
    base = read_base(dest) if options.append else None
    if isinstance(scan, InterleavedScan):  # samples of several images: shard_writer.interleaved
        job = docs_job(
            scan, src, dest, options, eng, base=base, progress=progress, on_total=on_total
        )
        return commit(job, eng, started, progress, on_total)
    if base is not None and base.manifest.interleaved is not None:
        raise ConfigError(
            f"{dest.display()}: holds samples of several images; samples of one image cannot "
            "be appended to it (pack them into a data set of their own)"
        )

    if on_total:
        on_total(len(scan.files), 0, "probe")
    files, infos, skipped = (probe_hub if isinstance(scan, HubScan) else probe_files)(
        scan,
        options.encode,
        fail=options.on_error is OnError.RAISE,
        progress=lambda n: progress(n, 0, 0),
        pool=eng.pool,
    )
    skipped = [*scan.problems, *skipped]
    if not files:
        raise InputError(
            f"{scan.name}: no valid images or videos: all {len(skipped)} inputs were skipped"
        )
    mixed = mixed_image_members(infos)
    if mixed:
        log.warning("%s: %s", scan.name, mixed)
    numbering = Numbering()
    if base is not None:
        scan, files = _relabel(scan, files, base)
        numbering = Numbering(first_shard=base.first_shard, first_key=base.next_key)
    layout = options.layout
    if isinstance(scan, HubScan):  # row group by row group: see shard_writer.hub
        files, infos = hub_order(scan, files, infos, layout.shuffle, layout.seed)
        layout = replace(layout, shuffle=False)
    specs = plan_layout(
        files,
        scan.classes,
        options=layout,
        prefix=options.prefix,
        infos=infos,
        numbering=numbering,
    )
    tasks = [
        (HubShardTask if isinstance(scan, HubScan) else ShardTask)(
            root=scan.root,
            dest_url=dest_url,
            storage_options=storage_options,
            spec=spec,
            classes=scan.classes,
            encode=options.encode,
            listing=scan.listing,
            **(scan.task_fields(spec) if isinstance(scan, HubScan) else {}),
        )
        for spec in specs
    ]
    appended = ""
    if base is not None:  # what is added, wherever it lands: a rerun adds nothing
        alone = plan_layout(files, scan.classes, options=layout, infos=infos)
        appended = fingerprint(scan, alone, options)
    job = Job(
        dest=dest,
        options=options,
        tasks=tasks,
        fingerprint=fingerprint(scan, specs, options),
        classes=scan.classes,
        recorded=options.recorded(),
        skipped=[s.to_json() for s in skipped],
        samples=len(files),
        base=base,
        appended=appended,
        inputs=(scan.name if isinstance(scan, HubScan) else src,),
        next_key=numbering.first_key + len(scan.files),
        videos=video_totals(infos),
    )
    return commit(job, eng, started, progress, on_total)


def _relabel(scan: Scan, files: list[SourceFile], base: Base) -> tuple[Scan, list[SourceFile]]:
    """An appended version's classes: DEST's, plus new names after them (their indices kept)."""
    classes, index = merge_classes(base.manifest.classes, scan.classes, scan.name)
    if index != list(range(len(index))):
        files = [replace(f, class_idx=index[f.class_idx]) if f.class_idx >= 0 else f for f in files]
    return replace(scan, classes=classes), files
