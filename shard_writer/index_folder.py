"""``wdstool index SOURCE... --out DIR``: the index of someone else's WebDataset, at any scale.

DataComp's pools, LAION re-releases, COYO and every img2dataset download come as up to
millions of tars with no ``index.json``. This counts them once -- from img2dataset's side files
where they are (``shard_writer.foreign_count``), a sample of tars checked against them, else from
the tars' headers -- in batches on threads or a Ray cluster, resumable after a kill
(``shard_writer.count_parts``), and writes into ``DIR``:

- ``index.json``: the wids shard index (``url``, ``nsamples``, ``filesize``; URLs absolute, a
  fingerprint of the shards and counts), what ``make_loader(DIR)`` and other readers take;
- ``index.shards.npz``: the same shards as arrays, from ``SIDE_MIN_SHARDS`` shards on, so that
  each host's first rank maps arrays instead of parsing JSON (``loaders.source_table``);
- ``index.offsets.npy``: every sample's byte offset, where the headers were read (a reader that
  splits a shard between workers starts at its sample with one ranged read); a shard counted
  from its side files has none (its readers start at byte 0, or the loader gives whole shards
  to ranks: ``make_loader(split="shards")``).

Files are written before the manifest that names them; the manifest last.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import ExitStack, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from shard_writer.count_parts import load_part, run_counts
from shard_writer.dest import Destination
from shard_writer.foreign_count import BatchCount, CountBatch, CountBy, Listed
from shard_writer.foreign_index import shards_of
from wdstool.base.errors import ConfigError, InputError
from wdstool.base.s3 import filesystem
from wdstool.base.urls import is_remote, local_path
from wdstool.base.web import is_web
from wdstool.format.img2dataset import side_files
from wdstool.format.manifest import MANIFEST_NAME, Manifest, ShardEntry
from wdstool.format.sample_offsets import OFFSETS_NAME, OffsetsFile, shards_digest
from wdstool.format.shard_table import SIDE_NAME, side_bytes

BATCH = 256  # shards a work item counts (a part kept per batch)
WORK = ".wdstool-index"  # the parts of a run, in DIR (a local DIR) until the index is written


@dataclass(frozen=True, kw_only=True)
class IndexOptions:
    """How ``wdstool index --out DIR`` counts: ``count_by`` (side files where there are,
    only, or the headers of every tar), ``check`` tars scanned to check side files against
    (``-1``: all), ``batch`` shards a work item, ``engine`` ``"local"`` (``workers`` batches
    at a time in threads) or ``"ray"`` (a task each, on ``ray_address``'s cluster)."""

    count_by: CountBy = CountBy.AUTO
    check: int = 16
    batch: int = BATCH
    engine: str = "local"
    workers: int = 4
    ray_address: str | None = None
    work: str | None = None  # where the parts go (default: DIR/.wdstool-index, or a temp dir)

    def __post_init__(self) -> None:
        object.__setattr__(self, "count_by", CountBy(self.count_by))
        if self.check < -1 or self.batch < 1 or self.workers < 1:
            raise ConfigError(
                f"check must be >= -1 (-1: every tar), batch and workers >= 1; got "
                f"check={self.check}, batch={self.batch}, workers={self.workers}"
            )
        if self.engine not in ("local", "ray"):
            raise ConfigError(f"engine={self.engine!r} is not one of 'local', 'ray'")


def _listing(urls: Sequence[str], opts: dict[str, Any] | None) -> list[Listed]:
    """Each shard's tar and side files as its folder's listing says (one listing a folder:
    a few requests per thousand objects on S3); shards of a folder that cannot be listed (a
    web server) are asked for one by one when counted."""
    folders: dict[str, dict[str, int] | None] = {}
    out = []
    for url in urls:
        folder, _, name = url.rpartition("/")
        if folder not in folders:
            folders[folder] = _list(folder, opts)
        sizes = folders[folder]
        if sizes is None:
            out.append(Listed())
            continue
        parquet, stats = (u.rsplit("/", 1)[-1] for u in side_files(url))
        out.append(Listed(sizes.get(name, -1), sizes.get(parquet, -1), stats in sizes))
    return out


def _list(folder: str, opts: dict[str, Any] | None) -> dict[str, int] | None:
    if not is_remote(folder):
        try:
            with os.scandir(local_path(folder) or ".") as it:
                return {e.name: e.stat().st_size for e in it if e.is_file()}
        except OSError:
            return None
    if is_web(folder):
        return None
    try:
        fs, path = filesystem(folder, opts)
        fs.invalidate_cache(path.rstrip("/"))
        found = fs.ls(path.rstrip("/"), detail=True)
    except Exception:  # unlistable: the shards are asked for one by one
        return None
    return {str(e["name"]).rsplit("/", 1)[-1]: int(e.get("size") or 0) for e in found}


def _absolute(url: str) -> str:
    return url if "://" in url else os.path.abspath(url)


def _batches(urls: list[str], listed: list[Listed], o: IndexOptions, opts: Any) -> list[CountBatch]:
    n = len(urls)
    check = np.zeros(n, dtype=bool)
    if o.check == -1:
        check[:] = True
    elif o.check:  # a seeded sample, the same for a rerun (its parts stay valid)
        check[np.random.default_rng(0).choice(n, min(o.check, n), replace=False)] = True
    return [
        CountBatch(
            index=i // o.batch,
            first=i,
            urls=tuple(urls[i : i + o.batch]),
            listed=tuple(listed[i : i + o.batch]),
            check=tuple(bool(c) for c in check[i : i + o.batch]),
            how=o.count_by,
            storage_options=opts,
        )
        for i in range(0, n, o.batch)
    ]


def _pool(o: IndexOptions, stack: ExitStack) -> Executor:
    if o.engine == "ray":
        from shard_writer.ray_engine import ray_executor

        return stack.enter_context(ray_executor(o.ray_address, o.workers))
    return stack.enter_context(ThreadPoolExecutor(o.workers))


def _work_folder(out: str, o: IndexOptions) -> Path:
    if o.work is not None:
        return Path(o.work)
    if not is_remote(out):
        return Path(local_path(out)) / WORK
    key = hashlib.sha256(out.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"wdstool-index-{key}"


def write_index_folder(
    sources: list[str],
    out: str,
    options: IndexOptions | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> dict[str, Any]:
    """Count the shards of ``sources`` and write their index into the folder or prefix
    ``out`` (see the module docstring); returns a summary: counts, how each was counted, what
    counting cost (requests, bytes) and each written file's size."""
    o = options or IndexOptions()
    started = time.perf_counter()
    urls = [_absolute(u) for src in sources for u in shards_of(src, storage_options)]
    if not urls:
        raise InputError(f"{', '.join(sources)}: no shards")
    if len(set(urls)) != len(urls):
        raise InputError("the sources name a shard twice")
    batches = _batches(urls, _listing(urls, storage_options), o, storage_options)
    work = _work_folder(out, o)
    with ExitStack() as stack:
        pool = _pool(o, stack) if len(batches) > 1 or o.engine == "ray" else None
        counts, kept = run_counts(batches, pool, work, progress)
    dest = Destination(out, storage_options)
    if dest.local:
        os.makedirs(dest.root, exist_ok=True)
    else:
        dest.ensure()
    manifest = index_manifest(
        urls,
        np.concatenate([c.nsamples for c in counts]).tolist(),
        np.concatenate([c.filesize for c in counts]).tolist(),
        _name(sources[0]),
    )
    manifest = _write_offsets(dest, manifest, batches, counts, work)
    side = side_bytes(manifest)
    if side is not None:
        dest.write_bytes(SIDE_NAME, side)
    elif dest.exists(SIDE_NAME):  # an earlier index's: it names another manifest
        dest.remove(SIDE_NAME)
    dest.write_bytes(MANIFEST_NAME, manifest.dumps())
    _clear(work)
    sides = sum(c.sides for c in counts)
    names = [MANIFEST_NAME, SIDE_NAME, OFFSETS_NAME]
    return {
        "index": dest.display(MANIFEST_NAME),
        "num_shards": len(manifest.shards),
        "num_samples": manifest.num_samples,
        "counted_by": {"side_files": sides, "headers": len(manifest.shards) - sides},
        "checked": sum(c.checked for c in counts),
        "batches": {"kept": kept, "counted": len(batches) - kept},
        "requests": sum(c.requests for c in counts),
        "bytes_read": sum(c.bytes for c in counts),
        "files": {n: s for n in names if (s := dest.size(n)) is not None},
        "seconds": round(time.perf_counter() - started, 3),
    }


def index_manifest(
    urls: Sequence[str], nsamples: Sequence[int], filesizes: Sequence[int], name: str
) -> Manifest:
    """The manifest of an index of someone else's shards (before its offsets file): URLs as
    given, their counts and sizes, no checksum, a fingerprint of all three."""
    entries = tuple(
        ShardEntry(u, k, s, "") for u, k, s in zip(urls, nsamples, filesizes, strict=True)
    )
    h = hashlib.sha256(b"wdstool index\n")
    for e in entries:
        h.update(f"{e.url}\0{e.nsamples}\0{e.filesize}\n".encode())
    return Manifest(shards=entries, fingerprint=h.hexdigest(), name=name)


def _name(source: str) -> str:
    """The data set's name: its folder's (a pattern's or a shard's folder)."""
    parts = source.rstrip("/").split("/")
    if "{" in parts[-1] or parts[-1].endswith((".tar", ".json")):
        parts = parts[:-1]
    return parts[-1] if parts else ""


def _write_offsets(
    dest: Destination,
    manifest: Manifest,
    batches: list[CountBatch],
    counts: list[BatchCount],
    work: Path,
) -> Manifest:
    """Write the samples' offsets of the scanned shards (the others' filled with UNKNOWN) into
    ``index.offsets.npy``, a batch's part at a time; the manifest naming it."""
    if not any(c.scanned.any() for c in counts):
        if dest.exists(OFFSETS_NAME):
            dest.remove(OFFSETS_NAME)
        return manifest
    total = manifest.num_samples
    big = max((s.filesize for s in manifest.shards), default=0) >= np.iinfo(np.uint32).max
    dtype = "<u8" if big else "<u4"
    tmp = dest.temp_path(OFFSETS_NAME)
    flat = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(total,))
    at = 0
    for b in batches:
        part = load_part(work, b, offsets=True)
        assert part is not None  # kept by run_counts
        taken = 0
        for n, scanned in zip(part.nsamples.tolist(), part.scanned.tolist(), strict=True):
            if scanned:
                flat[at : at + n] = part.offsets[taken : taken + n]
                taken += n
            else:
                flat[at : at + n] = np.iinfo(dtype).max
            at += n
    flat.flush()
    offset = flat.offset
    del flat
    dest.publish(tmp, OFFSETS_NAME)
    of = OffsetsFile(OFFSETS_NAME, dtype, offset, total, shards_digest(manifest.shards))
    return replace(manifest, sample_offsets=of)


def _clear(work: Path) -> None:
    for p in work.glob("part-*.npz"):
        p.unlink(missing_ok=True)
    with suppress(OSError):
        work.rmdir()


__all__ = ["BATCH", "IndexOptions", "index_manifest", "write_index_folder"]
