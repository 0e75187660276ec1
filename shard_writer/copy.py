"""Write one reshard output shard: copy its samples' members out of the source shards.

A picklable :class:`CopyTask` per output shard runs on pack's engines and through pack's
write -> hash -> publish -> marker path (:func:`shard_writer.write.write_published`). Member
bytes are copied as they are (a re-encoded image aside) under freshly written headers (fixed
metadata, as pack writes them), in source member order. Reads are positioned: one read (a ranged
GET on an object store) covers a run of samples lying back to back in one source shard, up to
``CHUNK`` bytes, so an unshuffled reshard reads its sources sequentially in large pieces and a
shuffled one one sample at a time; memory holds one run. Before a member is copied, the header
in front of its data is checked against the scan (a valid header for that size): a source that
changed since it was scanned is an error, never a silently wrong shard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shard_writer.image import BadImage
from shard_writer.probe import EncodeOptions
from shard_writer.reshard_plan import Carried
from shard_writer.tar_sources import Piece
from shard_writer.write import ShardOutcome, write_published
from wdstool.base.errors import InputError, StorageError
from wdstool.base.objects import Missing, SpanReader
from wdstool.format.tar_index import header_says
from wdstool.format.tar_write import BLOCK, END, write_member

CHUNK = 4 << 20  # at most this many bytes per read of consecutive samples (one run in memory)


def _runs(samples: tuple[Carried, ...]) -> list[tuple[int, int, int]]:
    """(shard, start, end) reads covering every piece in order; consecutive pieces lying back to
    back in one shard share a read while it stays under CHUNK."""
    runs: list[tuple[int, int, int]] = []
    for sample in samples:
        for p in sample.pieces:
            if runs:
                shard, start, end = runs[-1]
                if shard == p.shard and end == p.start and p.end - start <= CHUNK:
                    runs[-1] = (shard, start, p.end)
                    continue
            runs.append((p.shard, p.start, p.end))
    return runs


class _Reader:
    """Piece bytes in plan order, one run in memory at a time."""

    def __init__(self, task: CopyTask) -> None:
        self._task = task
        self._runs = _runs(task.samples)
        self._next = 0
        self._run: tuple[int, int, int] = (-1, 0, 0)
        self._buf = memoryview(b"")
        self._spans = SpanReader(task.storage_options)
        self.nread = 0

    def piece(self, p: Piece) -> memoryview:
        shard, start, end = self._run
        while not (shard == p.shard and start <= p.start and p.end <= end):
            shard, start, end = self._run = self._runs[self._next]
            self._next += 1
            self._buf = memoryview(self._read(shard, start, end))
            self.nread += end - start
        return self._buf[p.start - start : p.end - start]

    def _read(self, shard: int, start: int, end: int) -> bytes:
        url = self._task.sources[shard]
        try:
            data = self._spans.read(url, start, end)
        except Missing:
            raise InputError(f"{url}: source shard vanished during reshard") from None
        except OSError as exc:
            raise StorageError(f"{url}: cannot read: {exc.strerror or exc}") from None
        if len(data) != end - start:
            raise InputError(f"{url}: shorter than when it was scanned (changed during reshard?)")
        return data

    def close(self) -> None:
        self._spans.close()


@dataclass(frozen=True, kw_only=True)
class CopyTask:
    """One output shard: ``samples`` in order, copied from ``sources`` (shard index -> URL)."""

    name: str
    dest_url: str
    storage_options: dict[str, Any] | None
    sources: dict[int, str]
    samples: tuple[Carried, ...]
    encode: EncodeOptions

    def write(self, on_sample: Callable[[int], None] | None = None) -> ShardOutcome:
        return write_published(
            self.dest_url, self.storage_options, self.name, lambda w: self._copy(w, on_sample)
        )

    def _copy(
        self, write: Callable[[bytes], None], on_sample: Callable[[int], None] | None
    ) -> tuple[int, int, int]:
        reader = _Reader(self)
        filesize = 0
        try:
            for sample in self.samples:
                before = reader.nread
                views = [reader.piece(p) for p in sample.pieces]
                for p, m, name, size in sample.members():
                    data = self._member(sample, views, p, m)
                    if len(data) != size:  # only a re-encoded image can differ
                        url = self.sources[sample.pieces[p].shard]
                        raise InputError(
                            f"{url}: {name}: re-encoding gave another size than when scanned"
                        )
                    filesize += write_member(write, name, data)
                if on_sample is not None:
                    on_sample(reader.nread - before)
        finally:
            reader.close()
        write(END)
        return len(self.samples), filesize + len(END), reader.nread

    def _member(self, sample: Carried, views: list[memoryview], p: int, m: int) -> Any:
        piece = sample.pieces[p]
        _suffix, off, size = piece.members[m]
        at = off - piece.start
        if at < BLOCK or not header_says(bytes(views[p][at - BLOCK : at]), size):
            url = self.sources[piece.shard]
            raise InputError(
                f"{url}: changed since it was scanned (no header for a {size}-byte member at "
                f"offset {off - BLOCK}); run the command again"
            )
        data = views[p][at : at + size]
        if (p, m) != sample.image or sample.payload < 0:
            return data
        try:
            return self.encode.apply(bytes(data)).payload
        except BadImage as exc:
            url = self.sources[piece.shard]
            raise InputError(
                f"{url}: sample {sample.key!r}: {exc} (changed since scanned?)"
            ) from None
