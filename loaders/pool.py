"""Batch buffers in shared memory: allocated once, reused, handed across as slot coordinates.

A slot is a flat stretch of shared memory big enough for one batch of the recipe's largest
output (the largest size of a size schedule; every view of a multi-crop recipe) plus its labels;
a batch's tensors are carved out of it (:meth:`SharedPool.carve`) and cross to the main process
as coordinates (:class:`Pooled`). A slot's flag says who has it: ``FREE`` (the worker may write
it), ``OUT`` (handed out by the worker, on its way), ``HELD`` (delivered: the main process or
the user holds a tensor of it). The main process frees a slot (:meth:`SharedPool.release`) once
no reference to the delivered batch is left; a worker starting a new pass reclaims its ``OUT``
slots (:meth:`BufferPool.reclaim`), which by then can only be batches of an abandoned pass that
were never delivered (a ``break`` out of the loop, a validation loop cut short).
"""

from __future__ import annotations

import uuid
import weakref
from dataclasses import dataclass
from typing import Any

import torch

Size = int | tuple[int, int]  # an int is square
FREE, OUT, HELD = 1, 0, 2


def _hw(size: Size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else size


Layout = tuple[tuple[int, ...], tuple[int, ...]]  # (shape, strides in elements)


def image_layout(n: int, size: Size, channels_last: bool = False) -> Layout:
    """An [n,3,h,w] batch; its memory [n,h,w,3] when ``channels_last``."""
    h, w = _hw(size)
    if channels_last:
        return (n, 3, h, w), (3 * h * w, 1, 3 * w, 3)
    return (n, 3, h, w), (3 * h * w, h * w, w, 1)


def new_tensor(
    shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype, shared: bool
) -> torch.Tensor:
    """A tensor of ``shape`` and ``stride``, allocated in shared memory inside DataLoader
    workers (``shared``) so that handing it to the main process costs no extra copy."""
    numel = shape[0] * stride[0]
    if shared:
        try:
            itemsize = torch.empty(0, dtype=dtype).element_size()
            storage = torch.UntypedStorage._new_shared(numel * itemsize)
            return torch.empty(0, dtype=dtype).set_(storage, 0, shape, stride)
        except (AttributeError, RuntimeError):  # private API moved: fall back to a plain tensor
            pass
    return torch.empty_strided(shape, stride, dtype=dtype)


def new_batch(
    n: int,
    size: Size,
    shared: bool,
    dtype: torch.dtype = torch.uint8,
    channels_last: bool = False,
) -> torch.Tensor:
    """A [n,3,h,w] tensor (``size`` (h, w), or an int: square), in shared memory where
    ``shared``; with ``channels_last`` its memory is [n,h,w,3]."""
    return new_tensor(*image_layout(n, size, channels_last), dtype, shared)


def slot_bytes(pixel_bytes: int, batch_size: int) -> int:
    """Bytes of one slot: a batch's pixels (every view's) and its labels."""
    return _align(pixel_bytes) + batch_size * 8


def batch_bytes(batch_size: int, sizes: list[Size], dtype: torch.dtype) -> int:
    """Bytes of one slot of [B,3,h,w] batches: one of each of ``sizes`` and the labels."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    pixels = sum(batch_size * 3 * _hw(s)[0] * _hw(s)[1] * itemsize for s in sizes)
    return slot_bytes(pixels, batch_size)


def _align(n: int) -> int:
    return -(-n // 64) * 64


class SharedPool:
    """Batch slots in shared memory, allocated by the main process before the workers start
    (resident at once: torch touches every page of a shared storage), so workers inherit them: a batch then
    crosses to the main process as a few integers (:class:`Pooled`) instead of a tensor whose
    file descriptor is passed over a socket, with an authentication handshake, for every batch
    (that cost ~5% of a worker's time here). ``flags``: one byte per slot (see the module)."""

    def __init__(self, slots: int, slot_bytes: int, flags: Any) -> None:
        self.key = uuid.uuid4().hex
        self.slots, self.slot_bytes = slots, _align(slot_bytes)
        self.storage = torch.UntypedStorage._new_shared(max(1, slots * self.slot_bytes))
        self.flags = flags
        for i in range(slots):
            self.flags[i] = FREE
        _POOLS[self.key] = self

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:  # a spawned worker
        self.__dict__.update(state)
        _POOLS[self.key] = self

    def carve(
        self,
        slot: int,
        offset: int,
        shape: tuple[int, ...],
        stride: tuple[int, ...],
        dtype: torch.dtype,
    ) -> tuple[torch.Tensor, Pooled, int]:
        """A tensor of ``shape`` and ``stride`` at byte ``offset`` of ``slot``, its
        coordinates, and the offset after it."""
        itemsize = torch.empty(0, dtype=dtype).element_size()
        nbytes = _align(shape[0] * stride[0] * itemsize)
        if offset + nbytes > self.slot_bytes:
            raise ValueError(f"a batch of {shape} does not fit a {self.slot_bytes}-byte slot")
        coords = Pooled(self.key, slot, offset, str(dtype).removeprefix("torch."), shape, stride)
        return coords.resolve(), coords, offset + nbytes

    def hold(self, slot: int) -> None:
        """The batch in ``slot`` was delivered: the user holds it (a worker starting a pass
        leaves it alone)."""
        self.flags[slot] = HELD

    def release(self, slot: int) -> None:
        """The main process is done with the batch in ``slot``: a worker may write it again
        (the one way a slot comes back, besides a new pass reclaiming undelivered ones)."""
        self.flags[slot] = FREE


# key -> pool, for Pooled.resolve in the main process (and in a spawned worker). Weak: the
# dataset owns its pool, and a registry that kept every pool kept each loader's slots (shared
# memory, resident) for the life of the process (15 GB in one make-test worker).
_POOLS: weakref.WeakValueDictionary[str, SharedPool] = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class Pooled:
    """A batch tensor that stays in the shared pool: its slot, byte offset, dtype, shape and
    strides. Resolved in the main process (:meth:`resolve`); the DataLoader's pin-memory
    thread calls :meth:`pin_memory`, which copies it into pinned memory."""

    key: str
    slot: int
    offset: int
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    def resolve(self) -> torch.Tensor:
        """The tensor itself (``set_`` on the pool's storage, not a view of another tensor):
        views a user takes of it keep *it* alive, which is what tells the pool the slot is in
        use."""
        pool = _POOLS[self.key]
        dtype = getattr(torch, self.dtype)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        start = (self.slot * pool.slot_bytes + self.offset) // itemsize
        return torch.empty(0, dtype=dtype).set_(pool.storage, start, self.shape, self.stride)

    def pin_memory(self, device: Any = None) -> torch.Tensor:
        return self.resolve().pin_memory()


class Packed:
    """A small tensor crossing from a DataLoader worker as a numpy array (pickled by value).

    torch sends a tensor between processes by moving its storage to shared memory and passing
    a file descriptor over a socket, with a handshake: for a batch's tokenized captions
    (64 x 32 int64, 16 KB) that cost ~5% of the loader's throughput here, against ~0 for a
    copy of the bytes. :meth:`StreamingLoader.__iter__` turns it back into a tensor."""

    __slots__ = ("array",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.array = tensor.numpy()

    def tensor(self) -> torch.Tensor:
        return torch.from_numpy(self.array)


PACK_LIMIT = 1 << 20  # tensors up to this many bytes cross as Packed


class BufferPool:
    """One worker's slots of a :class:`SharedPool` (``size`` of them from ``base``).

    A fresh 9.6 MB shared-memory batch (64 x 3 x 224 x 224) costs ~5.5 ms in page faults alone
    (~85 us per sample, measured here), against ~0.15 ms for reusing memory. :meth:`get` hands
    out a free slot (flag ``OUT``), or -1 when none is free (then the caller allocates)."""

    def __init__(self, shared: SharedPool, base: int, size: int) -> None:
        self.shared = shared
        self.base = base
        self.size = size

    def get(self) -> int:
        flags = self.shared.flags
        for g in range(self.base, self.base + self.size):
            if flags[g] == FREE:
                flags[g] = OUT
                return g
        return -1

    def reclaim(self) -> int:
        """At the start of a pass: slots handed out and never delivered (an abandoned pass)
        are free again. Returns how many."""
        flags, n = self.shared.flags, 0
        for g in range(self.base, self.base + self.size):
            if flags[g] == OUT:
                flags[g] = FREE
                n += 1
        return n
