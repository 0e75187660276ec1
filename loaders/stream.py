"""Execute one worker's share of the epoch plan: read, buffer-shuffle, decode, batch.

Each stage is a plain generator over an iterator (testable with a list):
``read_slices``/``read_items`` -> ``worker_stream`` (block shuffle over compressed bytes) ->
``BatchAssembler`` (decode and augment straight into a preallocated batch tensor). Batches are formed here, inside the
DataLoader worker, so the DataLoader runs with ``batch_size=None``.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import logging
import random
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from loaders.augment import eval_augment, normalize_into, train_params, train_sample
from loaders.plan import (
    Item,
    Slice,
    WorkerPlan,
    block_permutation,
    block_seed,
    first_block,
    shuffle_blocks,
    take_items,
)
from loaders.source import DatasetIndex, ShardAccess
from wdstool.base.errors import SampleError, ShardError, WdsToolError
from wdstool.format.decode import decode_rgb, header_size
from wdstool.format.images import IMAGE_EXTENSIONS, IMAGE_ORDER
from wdstool.format.tar_read import Sample, TarSampleReader

log = logging.getLogger(__name__)
KEPT_EXTENSIONS = frozenset(IMAGE_EXTENSIONS | {"cls", "json", "txt"})


@dataclass(frozen=True, slots=True)
class Located:
    """A sample with where it came from (for error messages)."""

    url: str
    sample: Sample


def _keep(ext: str) -> bool:
    return ext in KEPT_EXTENSIONS


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
            f = self._open(s)
            try:
                f.peek(1)
            except BaseException:
                f.close()
                raise
            return f

        self._next = (position, self._pool.submit(work))

    def close(self) -> None:
        if self._next is not None:
            future = self._next[1]
            self._next = None
            with contextlib.suppress(Exception):
                future.result().close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def read_slices(
    slices: Iterable[Slice],
    index: DatasetIndex,
    access: ShardAccess | None = None,
) -> Iterator[Located]:
    """Yield the samples of each slice, in order: skip ``start`` samples by headers alone, then
    yield ``stop - start``. A shard with fewer samples than the manifest says is an error.
    Remote shards are opened one ahead."""
    access = access or ShardAccess()
    slices = list(slices)

    def open_slice(s: Slice) -> Any:
        i = s.shard
        return access.open(index.urls[i], size=index.size_of(i), sha256=index.sha256_of(i))

    ahead = _OpenAhead(open_slice)
    try:
        for pos, s in enumerate(slices):
            url = index.urls[s.shard]
            with ahead.take(pos, s) as f:
                if pos + 1 < len(slices):
                    nxt = slices[pos + 1]
                    if access.is_remote(index.urls[nxt.shard]):
                        f.peek(1)  # this shard's request goes first
                        ahead.start(pos + 1, nxt)
                reader = TarSampleReader(f, url, keep=_keep)
                if s.start:
                    reader.skip(s.start)
                it = iter(reader)
                for i in range(s.stop - s.start):
                    try:
                        sample = next(it)
                    except StopIteration:
                        raise ShardError(
                            f"{url}: ends after {s.start + i} samples; the manifest promised at "
                            f"least {s.stop} (re-pack, or run `wdstool verify`)"
                        ) from None
                    yield Located(url, sample)
    finally:
        ahead.close()


ReadRun = Callable[[list[Slice]], Iterator[Any]]


def read_items(items: Iterable[Item], read_run: ReadRun) -> Iterator[Any]:
    """Yield the samples of slices and pieces (a resumed epoch's remaining samples), in order.
    ``read_run`` reads a run of consecutive slices (one open-ahead reader for the run); a piece
    with exclusions reads its base items (at most one shuffle block) and drops the excluded."""
    run: list[Slice] = []
    for it in items:
        if isinstance(it, Slice):
            run.append(it)
            continue
        if run:
            yield from read_run(run)
            run = []
        if not it.exclude:
            yield from read_items(take_items(list(it.base), it.lo, len(it)), read_run)
            continue
        kept = it.kept()
        if not len(kept):
            continue
        keep = set(kept.tolist())
        last = int(kept[-1])
        for i, loc in enumerate(read_items(list(it.base), read_run)):
            if i in keep:
                yield loc
            if i >= last:
                break
    if run:
        yield from read_run(run)


def shard_reader(index: DatasetIndex, access: ShardAccess | None = None) -> ReadRun:
    def read_run(run: list[Slice]) -> Iterator[Located]:
        return read_slices(run, index, access)

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


@dataclass(frozen=True, kw_only=True)
class DecodeSpec:
    image_size: int
    train: bool
    output: str  # "uint8" | "float" | "encoded"
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None
    on_error: str = "raise"  # "raise" | "skip"
    channels_last: bool = False  # batches in [B,S,S,3] memory (torch.channels_last strides)


def _image_part(loc: Located) -> tuple[bytes, str]:
    parts = loc.sample.parts
    for ext in IMAGE_ORDER:
        if ext in parts:
            return parts[ext], ext
    raise SampleError(f"{loc.url}: sample {loc.sample.key!r} has no image member")


def _label(loc: Located) -> int:
    raw = loc.sample.parts.get("cls")
    if raw is None:
        raise SampleError(f"{loc.url}: sample {loc.sample.key!r} has no .cls member")
    try:
        return int(raw.strip())
    except ValueError:
        raise SampleError(f"{loc.url}: sample {loc.sample.key!r}: bad label {raw[:20]!r}") from None


def _new_batch(
    n: int,
    size: int,
    shared: bool,
    dtype: torch.dtype = torch.uint8,
    channels_last: bool = False,
) -> torch.Tensor:
    """A [n,3,size,size] tensor, allocated in shared memory inside DataLoader workers so that
    handing it to the main process costs no extra copy; with ``channels_last`` its memory is
    [n,size,size,3] (``torch.channels_last`` strides)."""
    numel = n * 3 * size * size
    shape = (n, size, size, 3) if channels_last else (n, 3, size, size)
    batch = None
    if shared:
        try:
            itemsize = torch.empty(0, dtype=dtype).element_size()
            storage = torch.UntypedStorage._new_shared(numel * itemsize)
            batch = torch.empty(0, dtype=dtype).set_(storage).view(shape)
        except (AttributeError, RuntimeError):  # private API moved: fall back to a plain tensor
            pass
    if batch is None:
        batch = torch.empty(shape, dtype=dtype)
    return batch.permute(0, 3, 1, 2) if channels_last else batch


class SharedPool:
    """Batch buffers in shared memory, allocated by the main process before the workers start
    (pages are only touched when first written), so workers inherit them: a batch then
    crosses to the main process as two integers (:class:`Pooled`) instead of a tensor whose
    file descriptor is passed over a socket, with an authentication handshake, for every batch
    (that cost ~5% of a worker's time here). ``pixels`` [slots, B, 3, S, S], ``labels``
    [slots, B]."""

    def __init__(
        self,
        slots: int,
        batch_size: int,
        image_size: int,
        dtype: torch.dtype,
        channels_last: bool = False,
    ) -> None:
        self.key = uuid.uuid4().hex
        flat = _new_batch(slots * batch_size, image_size, True, dtype, channels_last)
        self.pixels = flat.unflatten(0, (slots, batch_size))
        labels = torch.UntypedStorage._new_shared(slots * batch_size * 8)
        self.labels = torch.empty(0, dtype=torch.int64).set_(labels).view(slots, batch_size)
        _POOLS[self.key] = self

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:  # a spawned worker
        self.__dict__.update(state)
        _POOLS[self.key] = self


_POOLS: dict[str, SharedPool] = {}


@dataclass(frozen=True)
class Pooled:
    """A batch tensor that stays in the shared pool: ``what`` ("pixels" or "labels") of
    ``slot``, first ``n`` rows. Resolved in the main process (:meth:`resolve`); the DataLoader's
    pin-memory thread calls :meth:`pin_memory`, which copies it into pinned memory."""

    key: str
    what: str
    slot: int
    n: int

    def resolve(self) -> torch.Tensor:
        """The rows as a tensor of their own (``set_`` on the pool's storage, not a view): views
        a user takes of it keep *it* alive, which is what tells the pool the slot is in use."""
        v = getattr(_POOLS[self.key], self.what)[self.slot, : self.n]
        return torch.empty(0, dtype=v.dtype).set_(
            v.untyped_storage(), v.storage_offset(), v.shape, v.stride()
        )

    def pin_memory(self, device: Any = None) -> torch.Tensor:
        return self.resolve().pin_memory()


class BufferPool:
    """Shared-memory batch buffers a DataLoader worker reuses once the main process is done.

    A fresh 9.6 MB shared-memory batch (64 x 3 x 224 x 224) costs ~5.5 ms in page faults alone
    (~85 us per sample, measured here), against ~0.15 ms for reusing memory. ``flags`` is a
    byte array shared with the main process: the worker sets a slot's flag to 0 when it hands
    the buffer out; the main process sets it to 1 once the batch tensor it delivered is gone
    (no reference, no view left), and only then is the buffer written again. With ``shared``
    (a :class:`SharedPool` made by the main process) the buffers are that pool's slots, partial
    batches included; otherwise the worker allocates them, and partial batches and a pool with
    no free slot get a fresh buffer (slot -1)."""

    def __init__(self, flags: Any, base: int, size: int, shared: SharedPool | None = None) -> None:
        self.flags = flags
        self.base = base
        self.size = size
        self.shared = shared
        self.buffers: list[torch.Tensor | None] = [None] * size

    def get(
        self,
        n: int,
        image_size: int,
        dtype: torch.dtype = torch.uint8,
        channels_last: bool = False,
    ) -> tuple[torch.Tensor, int]:
        sh = self.shared
        if sh is not None and sh.pixels.dtype == dtype and n <= sh.pixels.shape[1]:
            for slot in range(self.size):
                g = self.base + slot
                if self.buffers[slot] is None or self.flags[g] == 1:
                    self.buffers[slot] = sh.pixels[g]
                    self.flags[g] = 0
                    return sh.pixels[g, :n], g
            return _new_batch(n, image_size, True, dtype, channels_last), -1
        for slot, buf in enumerate(self.buffers):
            if buf is None:
                buf = _new_batch(n, image_size, True, dtype, channels_last)
                self.buffers[slot] = buf
            elif (
                self.flags[self.base + slot] != 1
                or buf.shape != (n, 3, image_size, image_size)
                or buf.dtype != dtype
            ):
                continue
            self.flags[self.base + slot] = 0
            return buf, self.base + slot
        return _new_batch(n, image_size, True, dtype, channels_last), -1


def _next_sample(it: Iterator[Any], plan: WorkerPlan) -> Any:
    got = next(it, None)
    if got is None:
        raise ShardError(
            f"worker {plan.worker}: ran out of samples before its planned {plan.num_samples}"
        )
    return got


class BatchAssembler:
    """Decode + augment samples into batches of a planned size; count replaced samples."""

    def __init__(
        self, spec: DecodeSpec, aug_seed: str, shared: bool, pool: BufferPool | None = None
    ) -> None:
        """``aug_seed``: a sample's augmentation draws come from ``Random(f"{aug_seed}:{key}")``,
        so they do not depend on which rank or worker decodes it, nor on what came before (a
        resumed or re-sharded epoch augments every sample as the uninterrupted run would)."""
        self.spec = spec
        self.aug_seed = aug_seed
        self.shared = shared
        self.pool = pool
        self._scratch: torch.Tensor | None = None
        self._dest: torch.Tensor | None = None  # the batch slot the next decode may write into
        self.replaced = 0
        self.bytes_read = 0

    def _rng(self, loc: Located) -> random.Random:
        # bytes: keys from non-UTF-8 member names carry surrogates
        return random.Random(f"{self.aug_seed}:{loc.sample.key}".encode("utf-8", "surrogateescape"))

    def _prepare(self, loc: Located) -> tuple[Any, int]:
        """output="encoded": the image bytes, checked up to the header, with their augmentation
        draws (the same as ``_decode``'s), for a device-side decoder."""
        data, _ext = _image_part(loc)
        label = _label(loc)
        width, height = header_size(data, where=f"{loc.url}: sample {loc.sample.key!r}")
        params = train_params(height, width, self._rng(loc)) if self.spec.train else None
        return (data, params), label

    def _decode(self, loc: Located) -> tuple[Any, int]:
        if self.spec.output == "encoded":
            return self._prepare(loc)
        try:
            data, ext = _image_part(loc)
            label = _label(loc)
            where = f"{loc.url}: sample {loc.sample.key!r}"
            if self.spec.train and self.spec.transform is None:
                # a JPEG's crop is drawn from its header, so only the crop is decoded
                size, rng = self.spec.image_size, self._rng(loc)
                return train_sample(data, size, rng, self._dest, where=where), label
            img = decode_rgb(data, ext, where=where)
            if self.spec.transform is not None:
                return self.spec.transform(img), label
            return eval_augment(img, self.spec.image_size), label
        except WdsToolError:
            raise
        except Exception as exc:  # a user transform or a decoder bug: name the sample
            raise SampleError(
                f"{loc.url}: sample {loc.sample.key!r}: {type(exc).__name__}: {exc}"
            ) from exc

    def decoded(self, samples: Iterable[Located]) -> Iterator[tuple[torch.Tensor, int, str]]:
        """One (image, label, key) per input sample. Under on_error="skip" a bad sample is
        replaced by the worker's last good one (or, before any, by the next good one), so the
        number of outputs always equals the number of inputs."""
        last_good: Located | None = None
        pending = 0
        for loc in samples:
            self.bytes_read += sum(len(v) for v in loc.sample.parts.values())
            try:
                img, label = self._decode(loc)
                last_good = loc
            except SampleError as exc:
                if self.spec.on_error != "skip":
                    raise
                log.warning("replacing a bad sample: %s", exc.message)
                self.replaced += 1
                if last_good is None:
                    pending += 1
                    continue
                loc = last_good
                img, label = self._decode(loc)
            yield img, label, loc.sample.key
            while pending:
                pending -= 1
                img, label = self._decode(loc)
                yield img, label, loc.sample.key
        if pending:
            raise SampleError(f"all {pending} samples of this worker's share are bad")

    def batches(
        self, samples: Iterable[Located], plan: WorkerPlan, batch_size: int
    ) -> Iterator[dict[str, Any]]:
        """Yield ``plan.num_batches`` batch dicts (fewer after a resume: those after
        ``plan.skip`` samples); the last has ``plan.last_batch_size`` items."""
        sizes = [batch_size] * plan.num_batches
        if sizes:
            sizes[-1] = plan.last_batch_size
        sizes = sizes[plan.first_batch(batch_size) :]
        it = self.decoded(samples)
        if self.spec.output == "encoded":
            yield from self._encoded_batches(it, sizes, plan)
            return
        for n in sizes:
            before, bytes_before = self.replaced, self.bytes_read
            pixels: torch.Tensor | None = None
            slot = -1
            as_float = self.spec.output == "float" and self.spec.transform is None
            size, cl = self.spec.image_size, self.spec.channels_last
            if self.spec.transform is None:
                if as_float:  # uint8 scratch, never shared: the float batch leaves the worker
                    if self._scratch is None or self._scratch.shape[0] != n:
                        self._scratch = _new_batch(n, size, False, torch.uint8, cl)
                    pixels = self._scratch
                elif self.pool is not None and (n == batch_size or self.pool.shared is not None):
                    pixels, slot = self.pool.get(n, size, torch.uint8, cl)
                else:
                    pixels = _new_batch(n, size, self.shared, torch.uint8, cl)
            labels = torch.empty(n, dtype=torch.int64)
            keys: list[str] = []
            outputs: list[torch.Tensor] = []
            for i in range(n):
                # train augmentation resizes straight into the slot (no copy of the result)
                self._dest = None if pixels is None else pixels[i]
                img, label, key = _next_sample(it, plan)
                self._dest = None
                if pixels is None:
                    outputs.append(img)
                elif img.data_ptr() != pixels[i].data_ptr():
                    pixels[i].copy_(img)
                labels[i] = label
                keys.append(key)
            batch = torch.stack(outputs) if pixels is None else pixels
            if pixels is None and cl and batch.dim() == 4:  # a user transform's images
                batch = batch.contiguous(memory_format=torch.channels_last)
            if as_float:
                assert pixels is not None
                if self.pool is not None and (n == batch_size or self.pool.shared is not None):
                    out, slot = self.pool.get(n, size, torch.float32, cl)
                else:
                    out = _new_batch(n, size, self.shared, torch.float32, cl)
                batch = normalize_into(pixels, out)
            shared = self.pool.shared if self.pool is not None else None
            pooled = shared is not None and slot >= 0
            if pooled:  # stays in the pool: send its coordinates
                shared.labels[slot, :n] = labels
                batch = Pooled(shared.key, "pixels", slot, n)  # type: ignore[assignment]
                labels = Pooled(shared.key, "labels", slot, n)  # type: ignore[assignment]
            yield {
                "pixel_values": batch,
                "labels": labels,
                "keys": keys,
                "num_replaced": self.replaced - before,
                "num_bytes": self.bytes_read - bytes_before,
                "buffer_slot": slot,
                "pooled": pooled,
            }

    def _encoded_batches(
        self, it: Iterator[tuple[Any, int, str]], sizes: list[int], plan: WorkerPlan
    ) -> Iterator[dict[str, Any]]:
        for n in sizes:
            before, bytes_before = self.replaced, self.bytes_read
            datas: list[bytes] = []
            crops = torch.zeros((n, 4), dtype=torch.int32)
            flips = torch.zeros(n, dtype=torch.bool)
            labels = torch.empty(n, dtype=torch.int64)
            keys: list[str] = []
            for i in range(n):
                (data, params), label, key = _next_sample(it, plan)
                datas.append(data)
                if params is not None:
                    crops[i] = torch.tensor(params[:4], dtype=torch.int32)
                    flips[i] = params[4]
                labels[i] = label
                keys.append(key)
            offsets = torch.tensor(
                [0, *itertools.accumulate(len(d) for d in datas)], dtype=torch.int64
            )
            joined = bytearray(b"".join(datas))
            yield {
                "encoded": torch.frombuffer(joined, dtype=torch.uint8)
                if joined
                else torch.empty(0, dtype=torch.uint8),
                "offsets": offsets,
                "crops": crops,
                "flips": flips,
                "labels": labels,
                "keys": keys,
                "num_replaced": self.replaced - before,
                "num_bytes": self.bytes_read - bytes_before,
                "buffer_slot": -1,
            }
