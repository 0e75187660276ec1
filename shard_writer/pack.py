"""``pack``: ImageFolder tree or listing -> shards + ``index.json``, in parallel, resumable,
reproducible.

Steps: scan SRC (walk the tree, or read the listing) -> probe every image (measuring re-encoded
sizes) -> pure layout -> check DEST -> write the shards
not already complete (process pool) -> write ``index.json`` last. A shard is complete when its
final file exists and its size and sha256 equal what its marker (written right after
publishing) recorded; anything else is rewritten. Output bytes depend only on the input and on
the options recorded in the manifest, never on the number of workers.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

from shard_writer.dest import STATE_DIR, Destination
from shard_writer.execute import execute, init_worker
from shard_writer.layout import plan_layout
from shard_writer.listing import scan_source
from shard_writer.members import mixed_image_members
from shard_writer.options import PackOptions, PackSummary, ProgressFn, usable_cores
from shard_writer.probe import probe_files
from shard_writer.publish import fingerprint, prepare_dest, reusable, summary_from_manifest
from shard_writer.write import OnError, ShardOutcome, ShardTask
from wdstool.base.errors import InputError
from wdstool.base.urls import is_remote, local_path
from wdstool.format.manifest import MANIFEST_NAME, ShardEntry, build_manifest

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
    """Pack ``src`` (an ImageFolder tree, or a listing file: a .csv, .tsv, .jsonl or .parquet
    file naming one image per row) into shards and ``index.json`` under ``dest_url``.

    ``on_total(items, shards, phase)`` announces each phase ("probe", then "pack");
    ``progress(samples, source bytes, shards)`` reports increments within it. Raises WdsToolError subclasses with one-line messages.
    """
    options = options or PackOptions()
    workers = options.workers or usable_cores()
    if options.engine == "ray":
        return _pack_on_ray(src, dest_url, options, workers, storage_options, progress, on_total)
    if workers == 1:
        return _pack(src, dest_url, options, 1, None, None, storage_options, progress, on_total)
    ctx = mp.get_context("spawn")  # never fork a process that may hold threads (tqdm, s3fs)
    q = ctx.Queue()
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=init_worker, initargs=(q,)
    ) as pool:
        try:
            return _pack(
                src, dest_url, options, workers, pool, q, storage_options, progress, on_total
            )
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _absolute(url: str) -> str:
    """A local path made absolute against the caller's directory: Ray tasks run wherever
    their node was started."""
    return url if is_remote(url) else os.path.abspath(local_path(url))


def _pack_on_ray(
    src: str,
    dest_url: str,
    options: PackOptions,
    workers: int,
    storage_options: dict[str, Any] | None,
    progress: ProgressFn | None,
    on_total: Callable[[int, int, str], None] | None,
) -> PackSummary:
    from shard_writer.ray_engine import ray_executor

    src, dest_url = _absolute(src), _absolute(dest_url)
    started = time.perf_counter()
    with ray_executor(options.ray_address, workers) as pool:
        ray_start = time.perf_counter() - started
        try:
            summary = _pack(
                src, dest_url, options, workers, pool, None, storage_options, progress, on_total
            )
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        summary.workers = pool.cpus()
        summary.extra = {
            "engine": "ray",
            "ray_start_s": round(ray_start, 3),
            "shards_per_node": pool.tasks_per_node("_run_task"),
            "probes_per_node": pool.tasks_per_node("_probe_chunk"),
        }
        return summary


def _pack(
    src: str,
    dest_url: str,
    options: PackOptions,
    workers: int,
    pool: Executor | None,
    q: Any,
    storage_options: dict[str, Any] | None,
    progress: ProgressFn | None,
    on_total: Callable[[int, int, str], None] | None,
) -> PackSummary:
    progress = progress or (lambda *_: None)
    started = time.perf_counter()
    scan = scan_source(src, options.columns, storage_options)
    if options.on_error is OnError.FAIL and scan.problems:
        p = scan.problems[0]
        raise InputError(f"{os.path.join(scan.root, p.path)}: {p.reason}")
    if not scan.files:
        raise InputError(f"{scan.root}: no images found (extensions: .jpg .jpeg .png .webp ...)")

    if on_total:
        on_total(len(scan.files), 0, "probe")
    files, infos, skipped = probe_files(
        scan,
        options.encode,
        fail=options.on_error is OnError.FAIL,
        progress=lambda n: progress(n, 0, 0),
        pool=pool,
    )
    skipped = [*scan.problems, *skipped]
    if not files:
        raise InputError(f"{scan.name}: no valid images: all {len(skipped)} inputs were skipped")
    mixed = mixed_image_members(infos)
    if mixed:
        log.warning("%s: %s", scan.name, mixed)
    specs = plan_layout(
        files, scan.classes, options=options.layout, prefix=options.prefix, infos=infos
    )
    fp = fingerprint(scan, specs, options)
    dest = Destination(dest_url, storage_options)
    existing = prepare_dest(dest, fp, options)
    if existing is not None:
        return summary_from_manifest(dest, existing, started, workers)

    if on_total:
        on_total(len(files), len(specs), "pack")
    done: dict[str, ShardOutcome] = {}
    todo = []
    for spec in specs:
        outcome = reusable(dest, spec)
        if outcome is not None:
            done[spec.name] = outcome
            progress(outcome.nsamples, outcome.source_bytes, 1)
        else:
            todo.append(spec)
    reused = len(done)
    tasks = [
        ShardTask(
            root=scan.root,
            dest_url=dest_url,
            storage_options=storage_options,
            spec=spec,
            classes=scan.classes,
            encode=options.encode,
            listing=scan.listing,
        )
        for spec in todo
    ]
    for outcome in execute(tasks, pool, q, progress):
        done[outcome.name] = outcome

    outcomes = [done[s.name] for s in specs]
    manifest = build_manifest(
        [
            ShardEntry(url=o.name, nsamples=o.nsamples, filesize=o.filesize, sha256=o.sha256)
            for o in outcomes
        ],
        classes=scan.classes,
        fingerprint=fp,
        options=options.recorded(),
        skipped=[s.to_json() for s in skipped],
    )
    if options.sync:
        dest.sync([o.name for o in outcomes])
    dest.write_bytes(MANIFEST_NAME, manifest.dumps())
    dest.remove(STATE_DIR)
    return PackSummary(
        dest=dest.display(),
        shards=len(outcomes),
        samples=manifest.num_samples,
        total_bytes=manifest.total_bytes,
        source_bytes=sum(o.source_bytes for o in outcomes),
        classes=len(scan.classes),
        skipped=list(manifest.skipped),
        reused_shards=reused,
        written_shards=len(todo),
        seconds=time.perf_counter() - started,
        workers=workers,
    )
