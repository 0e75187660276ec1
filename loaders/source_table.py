"""A large manifest read once per host: its shard table kept in the host's cache
(``wdstool.format.shard_table``) and what the loader's index reads of it, without an object per
shard.

:func:`kept_table` finds the table of a source's manifest (its URL and version, told by a stat
or a HEAD: ``wdstool.format.indexes.index_version``); :func:`keep_table` writes it after a rank
parsed the manifest, when the manifest lists at least ``MIN_SHARDS`` shards (a smaller one
parses in well under a second, and is not worth a cache entry) and did not change while it was
read. At most ``KEEP`` tables are kept in a cache folder: the least recently written go first.

Where a large manifest has no side file (``written_table``) and no table is kept yet, the
host's first rank streams it into arrays (:func:`streamed_table`,
``wdstool.format.manifest_stream``: 1,000,000 shards in ~0.6 s and the table's ~110 MB, where
``json.loads`` and an object per shard took 6.4 s and +946 MB), the next piece read in a thread
while one is parsed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from wdstool.base.errors import StorageError
from wdstool.base.remote import open_shard
from wdstool.base.s3 import read_head, read_object
from wdstool.base.urls import is_remote
from wdstool.format.indexes import index_version
from wdstool.format.manifest import MANIFEST_NAME, Manifest, resolve_shard_url
from wdstool.format.manifest_stream import CHUNK, stream_table
from wdstool.format.shard_table import (
    HEAD_BYTES,
    SIDE_NAME,
    ShardTable,
    load_table,
    save_table,
    side_table,
    table_key,
    table_of,
)

MIN_SHARDS = 10_000
KEEP = 16
LOCK_BYTES = 1 << 20  # a manifest this large (~7,000 shards) is parsed by one rank of a host


def cache_folder(cache_dir: str | os.PathLike[str] | None) -> Path:
    """Where per-host data lives: ``cache_dir``, else ``$WDSTOOL_CACHE``, else
    ``$XDG_CACHE_HOME/wdstool`` (``~/.cache/wdstool``)."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get("WDSTOOL_CACHE"):
        return Path(os.environ["WDSTOOL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "wdstool"


def kept_table(found: tuple[str, str], cache_dir: str | None) -> ShardTable | None:
    """The table kept for the manifest ``found`` = (URL, version: ``index_version``); None
    where there is none (then :func:`keep_table` may write it)."""
    return load_table(_tables(cache_dir) / table_key(*found))


def _large(found: tuple[str, str]) -> bool:
    size = found[1].split(":", 1)[0]
    return size.isdigit() and int(size) >= LOCK_BYTES


def written_table(
    found: tuple[str, str], storage_options: dict[str, Any] | None, cache_dir: str | None
) -> ShardTable | None:
    """The table ``pack``/``reshard`` wrote beside a large ``index.json``
    (``index.shards.npz``), where the manifest's first bytes say it is its own; kept in the
    host's cache for the host's other ranks. None where there is none (then the manifest is
    parsed)."""
    url = found[0]
    if not _large(found) or url.rsplit("/", 1)[-1] != MANIFEST_NAME:
        return None
    try:  # the side file first: where there is none (most manifests), one request, not two
        data = read_object(url[: -len(MANIFEST_NAME)] + SIDE_NAME, storage_options)
        head = read_head(url, HEAD_BYTES, storage_options) if data else b""
    except (FileNotFoundError, StorageError):
        return None
    table = side_table(data, head) if head and data else None
    if table is not None:
        _keep(table, found, cache_dir)
    return table


def streamed_table(
    found: tuple[str, str], storage_options: dict[str, Any] | None, cache_dir: str | None
) -> ShardTable | None:
    """The table of a large manifest streamed into arrays (no object per shard), kept for
    the host's other ranks; None where it is small, timm's ``_info.json``, or not written one
    way throughout (then it is parsed as always). A malformed manifest is the error the
    ordinary parse raises."""
    url = found[0]
    if not _large(found) or url.rsplit("/", 1)[-1] in ("_info.json", "info.json"):
        return None
    try:
        with (
            open_shard(url, storage_options, local_buffer=0) as f,
            _read_ahead(f.read, is_remote(url)) as read,
        ):
            table = stream_table(read, url)
    except FileNotFoundError:
        return None
    unchanged = table is not None and index_version(url, storage_options) == found
    if unchanged and len(table) >= MIN_SHARDS:  # type: ignore[arg-type]
        _keep(table, found, cache_dir)  # type: ignore[arg-type]
    return table


@contextlib.contextmanager
def _read_ahead(
    read: Callable[[int], bytes], ahead: bool, depth: int = 2
) -> Iterator[Callable[[int], bytes]]:
    """``read`` run in a thread ``depth`` pieces of ``CHUNK`` ahead of the caller, where
    ``ahead`` (a remote manifest arrives while the last piece is parsed); the thread is done
    when the block is, also where the caller stopped early (a manifest that is not one
    template, or malformed)."""
    if not ahead:
        yield read
        return
    pieces: queue.Queue[bytes | BaseException] = queue.Queue(depth)
    stop = threading.Event()

    def fill() -> None:
        try:
            while not stop.is_set() and (piece := read(CHUNK)):
                pieces.put(piece)
            pieces.put(b"")
        except BaseException as exc:  # handed to the reader, raised there
            pieces.put(exc)

    thread = threading.Thread(target=fill, daemon=True, name="manifest-read-ahead")
    thread.start()
    done = False

    def take(_: int) -> bytes:  # pieces of CHUNK, whatever is asked (the stream asks CHUNK)
        nonlocal done
        if done:
            return b""
        got = pieces.get()
        if isinstance(got, BaseException):
            raise got
        done = not got
        return got

    try:
        yield take
    finally:  # a piece it is blocked on putting is taken, so that it sees the stop
        stop.set()
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                pieces.get(timeout=0.05)


@contextlib.contextmanager
def parsing_lock(found: tuple[str, str], cache_dir: str | None) -> Iterator[None]:
    """Held while one process of this host parses a large manifest and keeps its table; the
    host's other ranks wait here, then map the table instead of each parsing the manifest
    (eight ranks of a node would each take seconds and ~1 GB at 10^9 samples). The OS lets go
    of the lock of a process that dies. A manifest under ``LOCK_BYTES``, or a cache that
    cannot be written: no lock."""
    if not _large(found):
        yield
        return
    tables = _tables(cache_dir)
    try:
        tables.mkdir(parents=True, exist_ok=True)
        fd = os.open(tables / f"{table_key(*found)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def keep_table(
    manifest: Manifest,
    identity: str,
    found: tuple[str, str],
    storage_options: dict[str, Any] | None,
    cache_dir: str | None,
) -> None:
    """Keep ``manifest``'s table for the next rank of this host, where it is large enough and
    the manifest is still the version ``found`` before it was read."""
    if len(manifest.shards) < MIN_SHARDS:
        return
    if index_version(found[0], storage_options) != found:  # changed while it was read
        return
    table = table_of(manifest, identity)
    if table is None:
        return
    _keep(table, found, cache_dir)


def _tables(cache_dir: str | None) -> Path:
    return cache_folder(cache_dir) / "tables"


def _keep(table: ShardTable, found: tuple[str, str], cache_dir: str | None) -> None:
    """Save ``table`` as the manifest ``found``'s, then drop the least recent past ``KEEP``."""
    tables = _tables(cache_dir)
    save_table(table, tables / table_key(*found))
    _prune(tables)


def _prune(tables: Path) -> None:
    try:
        kept = sorted(
            (p for p in tables.iterdir() if p.name.startswith("table-") and p.is_dir()),
            key=lambda p: p.stat().st_mtime,
        )
    except OSError:
        return
    for old in kept[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
        with contextlib.suppress(OSError):
            (tables / f"{old.name}.lock").unlink()


class TableUrls(Sequence[str]):
    """The shard URLs of a table, each made when asked for (relative names resolved against
    ``base``, as the manifest's are)."""

    def __init__(self, table: ShardTable, base: str) -> None:
        self.table, self.base = table, base

    def __len__(self) -> int:
        return len(self.table)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        name = self.table.name(i)
        return resolve_shard_url(self.base, name) if self.base else name

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))


class TableColumn(Sequence[Any]):
    """One column of a table as Python values: ints (``-1`` where the manifest does not say,
    read as None by the index) or checksums as text (``""``: none)."""

    def __init__(self, values: Any, text: bool = False) -> None:
        self.values, self.text = values, text

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        v = self.values[i]
        return v.decode() if self.text else int(v)


__all__ = [
    "KEEP",
    "LOCK_BYTES",
    "MIN_SHARDS",
    "TableColumn",
    "TableUrls",
    "cache_folder",
    "keep_table",
    "kept_table",
    "parsing_lock",
    "streamed_table",
    "written_table",
]
