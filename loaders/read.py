"""Execute one worker's share of the epoch plan up to the samples: read, then block-shuffle.

Each stage is a plain generator over an iterator (testable with a list):
``read_slices``/``read_items`` (the samples of the planned slices, each shard read by the
reader of its format, :mod:`wdstool.format.shard_formats`; remote shards opened one ahead) ->
``worker_stream`` (the restartable block shuffle over compressed bytes). What comes out goes
to :class:`loaders.batch.BatchAssembler`, inside the same DataLoader worker.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from loaders.parquet_read import parquet_samples
from loaders.parquet_source import ParquetIndex
from loaders.plan import (
    Item,
    Mix,
    Piece,
    Slice,
    WorkerPlan,
    block_permutation,
    block_seed,
    first_block,
    shuffle_blocks,
    take_items,
)
from loaders.plan.even_merge import sources_in_order
from loaders.source import DatasetIndex, ShardAccess
from loaders.split_reads import OpenedSlice, SliceOpener, pieces
from wdstool.base import counters
from wdstool.base.errors import ShardError, StorageError, WdsToolError
from wdstool.base.remote import set_page
from wdstool.format.images import IMAGE_EXTENSIONS
from wdstool.format.mapped import MappedMember, map_shard
from wdstool.format.shard_formats import Sample, SampleReader, format_for

log = logging.getLogger(__name__)
KEPT_EXTENSIONS = frozenset(IMAGE_EXTENSIONS | {"cls"})  # what the default schema reads


@dataclass(frozen=True, slots=True)
class Located:
    """A sample with where it came from: shard URL, source, repeat and padding marks. A planned
    sample that could not be read (a damaged shard under ``on_error="skip"``) has no ``sample``
    and says why in ``error``; it is replaced downstream like a bad image."""

    url: str
    sample: Sample | None
    source: int = 0
    rep: int = 0
    pad: bool = False
    error: str = ""


@dataclass(frozen=True)
class SourceReader:
    """How a worker reads one source's shards: its index, storage access and the member
    extensions its schema wants; picklable."""

    index: DatasetIndex
    access: ShardAccess = field(default_factory=ShardAccess)
    keep: frozenset[str] = KEPT_EXTENSIONS
    lazy: frozenset[str] = IMAGE_EXTENSIONS  # read out of a mapping when decoded (local shards)


class _OpenAhead:
    """Opens the next remote shard in a thread (request sent, first MB buffered) while the
    current one is being read, so a worker does not sit idle for a request's time to first
    byte at every shard boundary (~50 ms per 100 MB shard against moto on loopback; tens of
    ms on S3)."""

    def __init__(self, open_fn: Callable[[Slice], Any]) -> None:
        self._open = open_fn
        self._pool: ThreadPoolExecutor | None = None
        self._next: tuple[int, Future[Any]] | None = None

    def take(self, position: int, s: Slice) -> Any:
        if self._next is not None and self._next[0] == position:
            future = self._next[1]
            self._next = None
            return future.result()
        return self._open(s)

    def start(self, position: int, s: Slice) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="shard-open-ahead")

        def work() -> Any:
            opened = self._open(s)
            try:
                opened.f.peek(1)
            except BaseException:
                opened.f.close()
                raise
            return opened

        self._next = (position, self._pool.submit(work))

    def close(self) -> None:
        if self._next is not None:
            future = self._next[1]
            self._next = None
            with contextlib.suppress(Exception):
                future.result().f.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def read_slices(
    slices: Iterable[Slice],
    index: DatasetIndex,
    access: ShardAccess | None = None,
    keep: frozenset[str] = KEPT_EXTENSIONS,
    *,
    skip_damaged: bool = False,
    warned: set[str] | None = None,
    lazy: frozenset[str] = frozenset(),
    opener: SliceOpener | None = None,
) -> Iterator[Located]:
    """Yield the samples of each slice, in order: skip ``start`` samples (by headers alone, for
    tar), then yield ``stop - start``. Remote shards are opened one ahead.

    A shard that is missing, unreadable after the retries, cut short or corrupt is an error
    naming it; with ``skip_damaged`` its planned samples that could not be read are yielded as
    placeholders instead (logged once per slice with the byte offset), so every plan position
    is still filled and no other rank or worker reads anything different. ``warned`` collects the
    shards already logged, so a shard read in several slices is logged once. Members whose
    extension is in ``lazy`` come as :class:`wdstool.format.mapped.MappedMember` from local
    shards (read out of a memory mapping when decoded; not held in private memory meanwhile).
    ``opener`` opens each slice (:class:`loaders.split_reads.SliceOpener`: one per source and
    worker keeps the shards' offsets it fetched across runs and epochs)."""
    access = access or ShardAccess()
    if isinstance(index, ParquetIndex):  # row groups: their columns by range, not a stream
        for s, sample, why in parquet_samples(
            slices, index, access, skip_damaged=skip_damaged, warned=warned
        ):
            yield Located(index.urls[s.shard], sample, s.source, s.rep, s.pad, why)
        return
    slices = list(slices)
    opener = opener or SliceOpener(index, access)

    def open_slice(s: Slice) -> OpenedSlice:
        return opener.open(s.shard, s.start, s.stop)

    ahead = _OpenAhead(open_slice)
    try:
        for pos, s in enumerate(slices):
            url = index.urls[s.shard]
            done = 0
            reader: SampleReader | None = None
            try:
                opened = ahead.take(pos, s)
                with opened.f as f:
                    if pos + 1 < len(slices):
                        nxt = slices[pos + 1]
                        if access.is_remote(index.urls[nxt.shard]):
                            f.peek(1)  # this shard's request goes first
                            ahead.start(pos + 1, nxt)
                    mapping = map_shard(f, url) if lazy and not access.is_remote(url) else None
                    at = opened.at
                    reader = format_for(url).read(  # once per shard, never per sample
                        f,
                        url,
                        keep=keep.__contains__,
                        lazy=None if mapping is None else functools.partial(_mapped, mapping, url),
                        lazy_exts=lazy,
                        **({} if not at else {"start_offset": at}),
                    )
                    per_sample = opened.per_sample
                    if s.start and at is None:
                        reader.skip(s.start)
                        if per_sample is None:
                            set_page(f, None)  # the walk is over: on to the shard's end
                    begin = reader.offset  # the slice's samples' bytes are counted from here
                    it = iter(reader)
                    for i in range(len(s)):
                        if per_sample is not None:  # the end is not known: pieces to fit
                            set_page(f, pieces(len(s) - i, per_sample))
                        try:
                            sample = next(it)
                        except StopIteration:
                            raise ShardError(
                                f"{url}: ends after {s.start + i} samples; the manifest promised "
                                f"at least {s.stop} (re-pack, or run `wdstool verify`)"
                            ) from None
                        counters.count("bytes_read", reader.offset - begin)
                        begin = reader.offset
                        yield Located(url, sample, s.source, s.rep, s.pad)
                        done += 1
            except (ShardError, StorageError, OSError) as exc:
                if not skip_damaged:
                    raise
                why = exc.message if isinstance(exc, WdsToolError) else f"{url}: {exc}"
                at = reader.offset if reader is not None else 0
                if warned is None or url not in warned:
                    log.warning(
                        "damaged shard: %s (readable up to byte %d); its unreadable planned "
                        "samples are replaced",
                        why,
                        at,
                    )
                    if warned is not None:
                        warned.add(url)
                for _ in range(len(s) - done):
                    yield Located(url, None, s.source, s.rep, s.pad, f"{why} (byte {at})")
    finally:
        ahead.close()


def _mapped(mapping: Any, url: str, offset: int, size: int) -> MappedMember:
    return MappedMember(mapping, offset, size, url)


ReadRun = Callable[[list[Slice]], Iterator[Any]]


def read_items(items: Iterable[Item], read_run: ReadRun) -> Iterator[Any]:
    """Yield the samples of slices, mixes and pieces, in order. ``read_run`` reads a run of
    consecutive slices of one source (one open-ahead reader for the run); a mix reads each
    source's part and interleaves them; a piece with exclusions reads its base items (at most
    one shuffle block) and drops the excluded. Items marked ``pad`` yield padding samples."""
    run: list[Slice] = []
    for it in items:
        if isinstance(it, Slice):
            if run and run[-1].source != it.source:
                yield from read_run(run)
                run = []
            run.append(it)
            continue
        if run:
            yield from read_run(run)
            run = []
        stream = _read_mix(it, read_run) if isinstance(it, Mix) else _read_piece(it, read_run)
        if it.pad:
            stream = (replace(x, pad=True) if isinstance(x, Located) else x for x in stream)
        yield from stream
    if run:
        yield from read_run(run)


def _read_mix(mix: Mix, read_run: ReadRun) -> Iterator[Any]:
    streams = [read_items(part, read_run) for part in mix.per_source()]
    for i in sources_in_order(mix.spans, mix.lo, mix.hi):
        yield next(streams[i])


def _read_piece(piece: Piece, read_run: ReadRun) -> Iterator[Any]:
    if not piece.exclude:
        yield from read_items(take_items(list(piece.base), piece.lo, len(piece)), read_run)
        return
    kept = piece.kept()
    if not len(kept):
        return
    keep = set(kept.tolist())
    last = int(kept[-1])
    for i, loc in enumerate(read_items(list(piece.base), read_run)):
        if i in keep:
            yield loc
        if i >= last:
            break


def shard_reader(
    index: DatasetIndex | Sequence[SourceReader],
    access: ShardAccess | None = None,
    keep: frozenset[str] = KEPT_EXTENSIONS,
    *,
    skip_damaged: bool = False,
) -> ReadRun:
    """Reads runs of slices of one source, keeping only the members whose extension its reader
    wants (the others are skipped without being read). ``index`` is one source's index, or one
    :class:`SourceReader` per source of a mixture."""
    if isinstance(index, DatasetIndex):
        readers: Sequence[SourceReader] = [SourceReader(index, access or ShardAccess(), keep)]
    else:
        readers = index

    warned: set[str] = set()  # damaged shards logged already (once per shard and stream)
    openers = [SliceOpener(r.index, r.access) for r in readers]

    def read_run(run: list[Slice]) -> Iterator[Located]:
        r = readers[run[0].source]
        return read_slices(
            run,
            r.index,
            r.access,
            r.keep,
            skip_damaged=skip_damaged,
            warned=warned,
            lazy=r.lazy,
            opener=openers[run[0].source],
        )

    return read_run


def worker_stream(
    plan: WorkerPlan,
    read_run: ReadRun,
    *,
    shuffle_buffer: int,
    batch_size: int,
) -> Iterator[Any]:
    """A worker's samples in delivery order, from output ``plan.skip`` on.

    Shuffled streams are cut into blocks (``plan.shuffle_blocks``) and each block is yielded in
    a permutation seeded by (worker seed, block index): restarting at output ``skip`` re-reads
    one block (compressed bytes, nothing decoded), wherever the skip lands."""
    items = list(plan.items)
    n, skip = plan.num_samples, plan.skip
    if plan.shuffle_seed is None or shuffle_buffer <= 1:
        yield from read_items(take_items(items, skip, n - skip), read_run)
        return
    bounds = shuffle_blocks(n, shuffle_buffer, first_block(shuffle_buffer, batch_size))
    j0 = max(0, bisect.bisect_right(bounds, skip) - 1)
    stream = read_items(take_items(items, bounds[j0], n - bounds[j0]), read_run)
    for j in range(j0, len(bounds) - 1):
        size = bounds[j + 1] - bounds[j]
        block = list(itertools.islice(stream, size))
        if len(block) != size:
            raise ShardError(
                f"worker {plan.worker}: ran out of samples before its planned {plan.num_samples}"
            )
        order = block_permutation(block_seed(plan.shuffle_seed, j), size)
        drop = skip - bounds[j] if j == j0 else 0
        for i in order[drop:]:
            yield block[i]
