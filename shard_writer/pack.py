"""``pack``: ImageFolder tree -> shards + ``index.json``, in parallel, resumable, reproducible.

Steps: scan SRC -> (measure re-encoded sizes) -> pure layout -> check DEST -> write the shards
not already complete (process pool) -> write ``index.json`` last. A shard is complete when its
final file exists and its size and sha256 equal what its marker (written right after
publishing) recorded; anything else is rewritten. Output bytes depend only on the input and on
the options recorded in the manifest, never on the number of workers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import queue as queue_mod
import re
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from shard_writer.dest import STATE_DIR, Destination
from shard_writer.layout import LayoutOptions, ShardSpec, plan_layout
from shard_writer.probe import EncodeOptions, probe_files
from shard_writer.scan import Scan, scan_imagefolder
from shard_writer.write import (
    OnError,
    ShardOutcome,
    ShardTask,
    hash_file,
    marker_name,
    write_shard,
)
from wdstool.base.errors import ConfigError, DestinationError, InputError, ShardError
from wdstool.base.urls import is_remote, local_path
from wdstool.format.manifest import MANIFEST_NAME, ShardEntry, build_manifest, parse_manifest

log = logging.getLogger(__name__)
_PREFIX_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
STATE_NAME = f"{STATE_DIR}/state.json"
ENGINES = ("local", "ray")


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, kw_only=True)
class PackOptions:
    prefix: str = "train"
    max_count: int = 10_000
    max_size: int = 256 * 1000**2
    shuffle: bool = True
    seed: int = 0
    workers: int | None = None
    on_error: OnError = OnError.SKIP
    verify_decode: bool = False
    max_side: int | None = None
    quality: int | None = None
    overwrite: bool = False
    sync: bool = True  # fsync shards before index.json (durability; not part of the output)
    engine: str = "local"  # "local" (process pool) or "ray"; never part of the output
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix) or "/" in self.prefix:
            raise ConfigError(f"--prefix {self.prefix!r}: use letters, digits, '_', '-', '.'")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")
        if self.max_side is not None and self.max_side < 8:
            raise ConfigError(f"--max-side must be >= 8 pixels, got {self.max_side}")
        if self.quality is not None and not 1 <= self.quality <= 100:
            raise ConfigError(f"--quality must be within 1..100, got {self.quality}")
        if self.engine not in ENGINES:
            raise ConfigError(f"--engine {self.engine!r}: choose one of {', '.join(ENGINES)}")
        object.__setattr__(self, "on_error", OnError(self.on_error))
        LayoutOptions(max_count=self.max_count, max_size=self.max_size)  # validates limits

    @property
    def layout(self) -> LayoutOptions:
        return LayoutOptions(
            max_count=self.max_count, max_size=self.max_size, shuffle=self.shuffle, seed=self.seed
        )

    @property
    def encode(self) -> EncodeOptions:
        return EncodeOptions(
            verify_decode=self.verify_decode, max_side=self.max_side, quality=self.quality
        )

    def recorded(self) -> dict[str, Any]:
        """The options that determine the output bytes (recorded in the manifest)."""
        return {
            "prefix": self.prefix,
            "max_count": self.max_count,
            "max_size": self.max_size,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "on_error": self.on_error.value,
            "verify_decode": self.verify_decode,
            "max_side": self.max_side,
            "quality": self.quality,
        }


@dataclass(kw_only=True)
class PackSummary:
    dest: str
    shards: int
    samples: int
    total_bytes: int
    source_bytes: int
    classes: int
    skipped: list[dict[str, str]]
    reused_shards: int
    written_shards: int
    seconds: float
    workers: int
    up_to_date: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def images_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.source_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "dest": self.dest,
            "shards": self.shards,
            "samples": self.samples,
            "total_bytes": self.total_bytes,
            "source_bytes": self.source_bytes,
            "classes": self.classes,
            "skipped": self.skipped,
            "reused_shards": self.reused_shards,
            "written_shards": self.written_shards,
            "seconds": round(self.seconds, 3),
            "images_per_s": round(self.images_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 1),
            "workers": self.workers,
            "up_to_date": self.up_to_date,
            "engine": "local",
            **self.extra,
        }


ProgressFn = Callable[[int, int, int], None]  # (samples, source bytes, shards) increments


def _fingerprint(scan: Scan, specs: tuple[ShardSpec, ...], options: PackOptions) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"options": options.recorded(), "classes": scan.classes}).encode())
    for spec in specs:
        h.update(spec.name.encode())
        for f, key in zip(spec.samples, spec.keys, strict=True):
            h.update(
                f"\0{f.relpath}\0{f.size}\0{f.class_idx}\0{key}".encode("utf-8", "surrogateescape")
            )
    return h.hexdigest()


def _our_shard(name: str, prefix: str) -> bool:
    return name.startswith(f"{prefix}-") and name.endswith(".tar")


def _prepare_dest(dest: Destination, fingerprint: str, options: PackOptions) -> dict | None:
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
            "use --overwrite to replace it, or choose another DEST"
        )
    if manifest_raw is not None and manifest_raw.get("fingerprint") == fingerprint:
        return manifest_raw
    dest.write_bytes(STATE_NAME, json.dumps({"fingerprint": fingerprint}).encode())
    for name in dest.remove_stale_temps():
        log.info("removed stale temporary file %s", name)
    return None


def _reusable(dest: Destination, spec: ShardSpec) -> ShardOutcome | None:
    raw = dest.read_json(marker_name(spec.name))
    if raw is None:
        return None
    try:
        outcome = ShardOutcome.from_json(raw)
    except (KeyError, TypeError, ValueError):
        return None
    if not dest.local:
        # an object store's PUT is atomic and the upload was checked (size, ETag) before the
        # marker was written: the same ETag now means the same bytes, without downloading them
        info = dest.info(spec.name)
        if info is None or int(info["size"]) != outcome.filesize:
            return None
        if outcome.etag and info.get("ETag") == outcome.etag:
            return outcome
    elif dest.size(spec.name) != outcome.filesize:
        return None
    if hash_file(dest, spec.name) != (outcome.filesize, outcome.sha256):
        log.warning("%s: content differs from its marker; rewriting", dest.display(spec.name))
        return None
    return outcome


_progress_queue: Any = None


def _init_worker(q: Any) -> None:
    global _progress_queue
    _progress_queue = q


def _run_task(task: ShardTask) -> ShardOutcome:
    pending = [0, 0]

    def on_sample(nbytes: int) -> None:
        pending[0] += 1
        pending[1] += nbytes
        if pending[0] >= 16 and _progress_queue is not None:
            _progress_queue.put((pending[0], pending[1]))
            pending[0] = pending[1] = 0

    outcome = write_shard(task, on_sample)
    if pending[0] and _progress_queue is not None:
        _progress_queue.put((pending[0], pending[1]))
    return outcome


def _execute(
    tasks: list[ShardTask], pool: ProcessPoolExecutor | None, q: Any, progress: ProgressFn
) -> list[ShardOutcome]:
    """Write the shards, inline or in the pool; progress comes through ``q`` from workers
    (per sample), or per finished shard when there is no ``q`` (Ray tasks)."""
    if pool is None or (len(tasks) <= 1 and q is not None):
        outcomes = []
        for task in tasks:
            outcomes.append(write_shard(task, lambda n: progress(1, n, 0)))
            progress(0, 0, 1)
        return outcomes
    outcomes = []
    futures: set[Future[ShardOutcome]] = {pool.submit(_run_task, t) for t in tasks}
    try:
        while futures:
            done, futures = wait(futures, timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(q, progress)
            for fut in done:
                outcome = fut.result()
                outcomes.append(outcome)
                if q is None:
                    progress(outcome.nsamples, outcome.source_bytes, 1)
                else:
                    progress(0, 0, 1)
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise
    _drain(q, progress)
    return outcomes


def _drain(q: Any, progress: ProgressFn) -> None:
    while q is not None:
        try:
            n, nbytes = q.get_nowait()
        except queue_mod.Empty:
            return
        progress(n, nbytes, 0)


def pack(
    src: str,
    dest_url: str,
    options: PackOptions | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
    on_total: Callable[[int, int, str], None] | None = None,
) -> PackSummary:
    """Pack the ImageFolder tree ``src`` into shards and ``index.json`` under ``dest_url``.

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
        max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(q,)
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
    pool: ProcessPoolExecutor | None,
    q: Any,
    storage_options: dict[str, Any] | None,
    progress: ProgressFn | None,
    on_total: Callable[[int, int, str], None] | None,
) -> PackSummary:
    progress = progress or (lambda *_: None)
    started = time.perf_counter()
    scan = scan_imagefolder(src, storage_options)
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
        raise InputError(f"{scan.root}: no valid images: all {len(skipped)} inputs were skipped")
    specs = plan_layout(
        files, scan.classes, options=options.layout, prefix=options.prefix, infos=infos
    )
    fingerprint = _fingerprint(scan, specs, options)
    dest = Destination(dest_url, storage_options)
    existing = _prepare_dest(dest, fingerprint, options)
    if existing is not None:
        return _summary_from_manifest(dest, existing, started, workers)

    if on_total:
        on_total(len(files), len(specs), "pack")
    done: dict[str, ShardOutcome] = {}
    todo = []
    for spec in specs:
        outcome = _reusable(dest, spec)
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
        )
        for spec in todo
    ]
    for outcome in _execute(tasks, pool, q, progress):
        done[outcome.name] = outcome

    outcomes = [done[s.name] for s in specs]
    manifest = build_manifest(
        [
            ShardEntry(url=o.name, nsamples=o.nsamples, filesize=o.filesize, sha256=o.sha256)
            for o in outcomes
        ],
        classes=scan.classes,
        fingerprint=fingerprint,
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


def _summary_from_manifest(
    dest: Destination, raw: dict, started: float, workers: int
) -> PackSummary:
    manifest = parse_manifest(json.dumps(raw), dest.display(MANIFEST_NAME))
    for entry in manifest.shards:
        if dest.size(entry.url) != entry.filesize:
            raise ShardError(
                f"{dest.display(entry.url)}: missing or wrong size although index.json lists it; "
                "run `wdstool verify`, or pack again with --overwrite"
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
    )
