"""Write one shard: read its samples, check them, stream tar members, hash, publish atomically.

This runs inside pack's worker processes (or inline with one worker). Its inputs are a picklable
:class:`ShardTask`; its output a :class:`ShardOutcome`, also recorded in a small marker file so an
interrupted pack can reuse the shard. :func:`write_published` is that write -> hash -> publish ->
marker path for any producer of tar members (reshard's copy task uses it too); it also reads
back the local copy's headers for each sample's offset, which the manifest's offsets file
records (~30 ms for a shard of 10,000 samples, from the page cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from shard_writer.dest import STATE_DIR, Destination, ETagHasher
from shard_writer.image import BadImage
from shard_writer.layout import ShardSpec
from shard_writer.members import sample_members
from shard_writer.probe import EncodeOptions, Payload, payload_for
from shard_writer.scan import describe
from wdstool.base.errors import DestinationError, InputError
from wdstool.format.tar_index import scan_shard
from wdstool.format.tar_write import END, write_member


@dataclass(frozen=True, kw_only=True)
class ShardTask:
    root: str
    dest_url: str
    storage_options: dict[str, Any] | None
    spec: ShardSpec
    classes: tuple[str, ...]
    encode: EncodeOptions
    listing: str | None = None  # the listing SRC names, for messages

    @property
    def name(self) -> str:
        return self.spec.name

    def payloads(self) -> Iterator[Payload]:
        """What to store of each sample's image, in the shard's order."""
        for f, info in zip(self.spec.samples, self.spec.infos, strict=True):
            try:
                yield payload_for(self.root, f, info, self.encode, self.storage_options)
            except BadImage as exc:
                # the probe accepted it: the file changed since; counts are fixed by now
                raise InputError(describe(self.root, self.listing, f, str(exc))) from None

    def write(self, on_sample: Callable[[int], None] | None = None) -> ShardOutcome:
        return write_published(
            self.dest_url,
            self.storage_options,
            self.spec.name,
            lambda write: _write_samples(self, write, on_sample),
        )


@dataclass(frozen=True, kw_only=True)
class ShardOutcome:
    name: str
    nsamples: int
    filesize: int
    sha256: str
    source_bytes: int
    etag: str | None = None  # as stored (remote destinations)
    # what restart_markers did to its images: {"added": n, reason kept: n, ...}
    restarts: dict[str, int] = field(default_factory=dict)
    # where each sample starts (None: not known, a marker written before they were recorded)
    offsets: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "nsamples": self.nsamples,
            "filesize": self.filesize,
            "sha256": self.sha256,
            "source_bytes": self.source_bytes,
            "etag": self.etag,
        }
        if self.offsets is not None:
            out["offsets"] = list(self.offsets)
        return {**out, "restarts": self.restarts} if self.restarts else out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ShardOutcome:
        return cls(
            name=obj["name"],
            nsamples=int(obj["nsamples"]),
            filesize=int(obj["filesize"]),
            sha256=str(obj["sha256"]),
            source_bytes=int(obj.get("source_bytes", 0)),
            etag=obj.get("etag"),
            restarts={str(k): int(v) for k, v in obj.get("restarts", {}).items()},
            offsets=_marker_offsets(obj.get("offsets"), int(obj["nsamples"])),
        )


def _marker_offsets(raw: Any, nsamples: int) -> tuple[int, ...] | None:
    if not isinstance(raw, list) or len(raw) != nsamples:
        return None
    return tuple(int(v) for v in raw)


def marker_name(shard: str) -> str:
    return f"{STATE_DIR}/{shard}.json"


_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def _write_all(out: BinaryIO, parts: list[Any]) -> None:
    """Write ``parts`` with one ``writev`` per up to IOV_MAX of them, never joined first (a join
    copies every byte once more: ~0.4 s per 300 MB here). A write may write less than asked (a
    file size limit, a nearly full disk): keep writing; the next call raises the real error
    (EFBIG, ENOSPC) instead of leaving a silently truncated shard."""
    fd = out.fileno()
    views = [memoryview(p) for p in parts if len(p)]
    i = 0
    while i < len(views):
        n = os.writev(fd, views[i : i + _IOV_MAX])
        if not n:
            left = sum(len(v) for v in views[i:])
            raise OSError(f"write returned {n!r} with {left} bytes left")
        while n:
            size = len(views[i])
            if n >= size:
                n -= size
                i += 1
            else:
                views[i] = views[i][n:]
                n = 0


class _BackgroundWriter:
    """Writes and hashes in a thread (both release the GIL), in blocks of about ``block`` bytes
    (a list of the chunks written, hashed one by one and written with writev), so reading the
    next source files overlaps with writing and hashing the previous ones."""

    def __init__(self, out: BinaryIO, block: int = 4 << 20, etag: ETagHasher | None = None) -> None:
        self._out = out
        self.etag = etag
        self._block = block
        self._parts: list[bytes] = []
        self._pending = 0
        self.digest = hashlib.sha256()
        self._queue: queue.Queue[list[Any] | None] = queue.Queue(maxsize=4)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="shard-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (block := self._queue.get()) is not None:
            if self._error is None:
                try:
                    _write_all(self._out, block)
                    for part in block:
                        self.digest.update(part)
                        if self.etag is not None:
                            self.etag.update(part)
                except BaseException as exc:  # re-raised in the producer by close()
                    self._error = exc

    def write(self, chunk: bytes) -> None:
        self._parts.append(chunk)
        self._pending += len(chunk)
        if self._pending >= self._block:
            self._flush()

    def _flush(self) -> None:
        if self._parts:
            self._queue.put(self._parts)
            self._parts, self._pending = [], 0
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Stop the thread without writing what is pending (the caller is failing)."""
        self._parts = []
        self._error = self._error or RuntimeError("aborted")
        self._queue.put(None)
        self._thread.join()

    def close(self) -> None:
        try:
            self._flush()
        finally:
            self._queue.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error


def _write_samples(
    task: ShardTask, write: Callable[[bytes], None], on_sample: Callable[[int], None] | None
) -> tuple[int, int, int, dict[str, int]]:
    """Stream every sample of the shard as tar members; (samples, tar bytes, source bytes,
    what restart_markers did)."""
    spec = task.spec
    nsamples = filesize = source_bytes = 0
    restarts: Counter[str] = Counter()
    payloads = task.payloads()
    for f, info, key, got in zip(spec.samples, spec.infos, spec.keys, payloads, strict=True):
        for name, data in sample_members(f, info, key, got.data, task.classes):
            filesize += write_member(write, name, data)
        nsamples += 1
        source_bytes += got.nread
        if got.restarts:
            restarts[got.restarts] += 1
        if on_sample is not None:
            on_sample(got.nread)
    write(END)
    return nsamples, filesize + len(END), source_bytes, dict(restarts)


# writes the tar's bytes; (samples, tar bytes, source bytes[, what restart_markers did])
Producer = Callable[[Callable[[bytes], None]], tuple[Any, ...]]


def write_published(
    dest_url: str, storage_options: dict[str, Any] | None, name: str, produce: Producer
) -> ShardOutcome:
    """Build shard ``name`` from ``produce(write)`` (which writes the tar's bytes and returns
    (samples, tar bytes, source bytes)) under a temporary name, hashing as it goes; publish it
    atomically and record its marker. Nothing incomplete ever sits under ``name``."""
    dest = Destination(dest_url, storage_options)
    tmp = dest.temp_path(name)
    nsamples = filesize = source_bytes = 0
    restarts: dict[str, int] = {}
    try:
        try:
            with open(tmp, "wb", buffering=0) as out:
                sink = _BackgroundWriter(out, etag=None if dest.local else ETagHasher())
                try:
                    nsamples, filesize, source_bytes, *more = produce(sink.write)
                    restarts = more[0] if more else {}
                    sink.close()
                except BaseException:
                    sink.abort()
                    raise
            with open(tmp, "rb", buffering=0) as back:  # headers only: data is seeked past
                offsets = scan_shard(back, dest.display(name)).offsets
        except OSError as exc:  # disk full, file size limit, I/O error: name the shard
            where = "" if dest.local else f" (local temporary copy {tmp})"
            raise DestinationError(
                f"{dest.display(name)}: cannot write the shard{where}: {exc.strerror or exc}"
            ) from None
        # no fsync here: the command syncs every shard once, just before index.json is written
        stored_etag = dest.publish(
            tmp, name, etag=sink.etag.etag() if sink.etag is not None else None
        )
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    outcome = ShardOutcome(
        name=name,
        nsamples=nsamples,
        filesize=filesize,
        sha256=sink.digest.hexdigest(),
        source_bytes=source_bytes,
        etag=stored_etag,
        restarts=restarts,
        offsets=offsets if offsets is not None and len(offsets) == nsamples else None,
    )
    dest.write_bytes(marker_name(name), json.dumps(outcome.to_json()).encode("ascii"))
    return outcome


def hash_file(dest: Destination, name: str, chunk: int = 8 << 20) -> tuple[int, str]:
    """(size, sha256) of a published file."""
    digest = hashlib.sha256()
    size = 0
    with dest.open_read(name) as f:
        while block := f.read(chunk):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()
