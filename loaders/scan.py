"""Counting the samples of shards no index describes: once per data set, never per rank or epoch.

Where a source has no index (``wdstool.format.indexes``), the loader learns each shard's
samples from its tar headers (member data is skipped: seeked past on local files; remote ones
are walked in pieces of a few MB, ``wdstool.base.remote.WALK_PAGE``, the headers found in what
came, and a member larger than a piece is jumped over, so a scan is a few large requests a
shard, never a request a sample; a server that ignores Range sends it all), and keeps each
sample's offset, so that workers which split a shard start reading at their first
sample. The scan is done once per data set:

- in a torchrun job (``torch.distributed`` initialized), rank 0 scans and hands the result to
  every rank (one ``broadcast_object_list``; an error is handed on too, so no rank waits
  forever);
- with ``cache_dir``, the result is kept there (``scans/<hash of the shard URLs>.json``), and
  the processes of a host that need it at the same time wait on a lock while the first scans;
- on a shard cut short, under ``on_error="skip"`` the samples before the cut are counted (the
  rest of the shard is not there to read) and the damage is logged; otherwise it is an error.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wdstool.base.errors import WdsToolError
from wdstool.base.remote import WALK, set_page
from wdstool.format.shard_formats import TAR, count_samples, format_for
from wdstool.format.tar_index import ShardScan, scan_shard

log = logging.getLogger(__name__)
SCANS = "scans"
SCAN_VERSION = 2


def scan_shards(
    urls: list[str], open_fn: Callable[[str], Any], *, skip_damaged: bool
) -> list[ShardScan]:
    """Every shard of ``urls``, in threads (remote shards: one request each at a time)."""
    started = time.perf_counter()

    def one(url: str) -> ShardScan:
        with open_fn(url) as f:
            if format_for(url) is TAR:
                set_page(f, WALK)  # headers, in pieces of a few MB
                return scan_shard(f, url, skip_damaged=skip_damaged)
            return ShardScan(url, count_samples(f, url), -1)  # a registered format: a count

    with ThreadPoolExecutor(max_workers=min(8, len(urls))) as pool:
        scans = list(pool.map(one, urls))
    log.warning(
        "no index: counted %d samples in %d shards by a header-only scan in %.2f s (an "
        "index.json, `wdstool pack`'s or one `wdstool index SOURCE --out PATH` writes for "
        "shards you cannot write next to, skips this)",
        sum(s.nsamples for s in scans),
        len(urls),
        time.perf_counter() - started,
    )
    return scans


def _key(urls: list[str]) -> str:
    return hashlib.sha256("\n".join(urls).encode()).hexdigest()[:32]


def _load(path: str, urls: list[str]) -> list[ShardScan] | None:
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return None
    if obj.get("version") != SCAN_VERSION or obj.get("urls") != urls:
        return None
    return [
        ShardScan(u, n, s, None if o is None else tuple(o), d) for u, n, s, o, d in obj["shards"]
    ]


def _save(path: str, urls: list[str], scans: list[ShardScan]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    obj = {
        "version": SCAN_VERSION,
        "urls": urls,
        "shards": [
            [
                s.url,
                s.nsamples,
                s.filesize,
                None if s.offsets is None else list(s.offsets),
                s.damage,
            ]
            for s in scans
        ],
    }
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def _cached(
    urls: list[str], cache_dir: str, scan: Callable[[], list[ShardScan]]
) -> list[ShardScan]:
    """The scan kept in ``cache_dir``: the first process of a host scans under a lock, the
    others (and later runs) read what it wrote."""
    folder = os.path.join(cache_dir, SCANS)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, _key(urls) + ".json")
    found = _load(path, urls)
    if found is not None:
        return found
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            found = _load(path, urls)
            if found is not None:
                return found
            scans = scan()
            if not any(s.damage for s in scans):  # a damaged shard is scanned again next time
                _save(path, urls, scans)
            return scans
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _distributed() -> Any:
    """torch.distributed where a job of several ranks has initialized it, else None."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def shared_scan(
    urls: list[str],
    open_fn: Callable[[str], Any],
    *,
    skip_damaged: bool,
    cache_dir: str | None = None,
) -> list[ShardScan]:
    """The scan of ``urls``, done once for the data set (see the module's docstring)."""

    def scan() -> list[ShardScan]:
        if cache_dir is not None:
            return _cached(
                urls, cache_dir, lambda: scan_shards(urls, open_fn, skip_damaged=skip_damaged)
            )
        return scan_shards(urls, open_fn, skip_damaged=skip_damaged)

    dist = _distributed()
    if dist is None:
        return scan()
    box: list[Any] = [None]
    if dist.get_rank() == 0:
        try:
            box[0] = scan()
        except WdsToolError as exc:
            box[0] = exc
            with contextlib.suppress(Exception):
                dist.broadcast_object_list(box, src=0)
            raise
    dist.broadcast_object_list(box, src=0)
    if isinstance(box[0], WdsToolError):
        raise type(box[0])(f"rank 0 could not count the shards: {box[0].message}")
    return box[0]


__all__ = ["ShardScan", "scan_shard", "scan_shards", "shared_scan"]
