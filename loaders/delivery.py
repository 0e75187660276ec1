"""What a worker's batch is made of besides the decoding: where its tensors go (:class:`Slot`:
carved out of a pool slot, or allocated), what it carries besides pixels (:class:`BatchMeta`:
labels, keys, fields, sources, valid flags), and what crosses to the loader
(:class:`Delivery`: the batch and the worker's bookkeeping)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from loaders.pool import PACK_LIMIT, BufferPool, Packed, Pooled, new_tensor


class Decoded(NamedTuple):
    """One sample as the assembler batches it."""

    payload: Any  # what its kind batches (loaders.kinds): a tensor per view, (bytes, Geometry)...
    label: int | None
    key: str
    fields: dict[str, Any] | None
    source: int
    valid: bool  # False for padding (uneven="mask") and replacements


@dataclass
class Delivery:
    """What a worker hands the loader for one batch: the batch as the user sees it (only its
    documented keys; tensors of a pool slot travel as coordinates) and the bookkeeping: the
    pool ``slot`` it lies in (-1: none), samples ``replaced``, the shards they came from and why
    (the first reason per shard), the compressed bytes read, and where the worker's time went
    since its previous batch (``loaders.monitor.clock``)."""

    batch: dict[str, Any]
    slot: int = -1
    replaced: int = 0
    replaced_from: dict[str, int] = field(default_factory=dict)
    nbytes: int = 0
    replaced_why: dict[str, str] = field(default_factory=dict)
    stats: dict[str, float] | None = None  # the worker's clock since its last batch

    def pin_memory(self, device: Any = None) -> Delivery:
        """What torch's pin-memory thread calls: the batch's tensors copied to pinned memory
        (a pooled tensor's slot is then free to reuse)."""
        from torch.utils.data._utils.pin_memory import pin_memory

        self.batch = pin_memory(self.batch, device)
        return self


class Slot:
    """Where one batch's tensors go: carved one after another out of a free slot of the
    worker's pool (they cross as coordinates), or allocated where none is free (slot -1)."""

    def __init__(self, pool: BufferPool | None, n: int, shared: bool) -> None:
        self.pool, self.n, self.shared = pool, n, shared
        self.slot = pool.get() if pool is not None else -1
        self.offset = 0
        self.coords: dict[int, Pooled] = {}  # id of a carved tensor -> its coordinates

    def tensor(
        self, shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype
    ) -> torch.Tensor:
        """A tensor of ``shape`` and ``stride``: carved out of the slot, or allocated."""
        if self.slot < 0:
            return new_tensor(shape, stride, dtype, self.shared)
        shared = self.pool.shared  # type: ignore[union-attr]
        t, coords, self.offset = shared.carve(self.slot, self.offset, shape, stride, dtype)
        self.coords[id(t)] = coords
        return t

    def send(self, t: torch.Tensor) -> Any:
        """What crosses for ``t``: its coordinates if it was carved out of the slot."""
        return self.coords.get(id(t), t)


class BatchMeta:
    """Everything a batch carries besides the kind's entries, collected sample by sample:
    labels (``labelled``: when any source has them), keys, field rows (``fielded``), sources
    (``source_ids``) and valid flags (``with_valid``)."""

    def __init__(
        self,
        n: int,
        *,
        labelled: bool,
        fielded: bool,
        source_ids: tuple[int, ...] | None,
        with_valid: bool,
    ) -> None:
        self.labels = torch.empty(n, dtype=torch.int64) if labelled else None
        self.fielded = fielded
        self.keys: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self.ids = source_ids
        self.sources = torch.empty(n, dtype=torch.int64) if source_ids is not None else None
        self.valid = torch.empty(n, dtype=torch.bool) if with_valid else None

    def add(self, i: int, got: Decoded) -> None:
        _payload, label, key, values, source, valid = got
        if self.labels is not None:
            self.labels[i] = label
        self.keys.append(key)
        if self.fielded:  # one row per sample, {} for a source without fields
            self.rows.append(values or {})
        if self.sources is not None:
            self.sources[i] = self.ids[source]  # type: ignore[index]
        if self.valid is not None:
            self.valid[i] = valid

    def into(self, batch: dict[str, Any], labels: Any, fields: dict[str, Any]) -> None:
        """Add the entries to ``batch`` (``labels`` as given: it may be pooled by now; the
        collated ``fields``)."""
        if labels is not None:
            batch["labels"] = labels
        batch["keys"] = self.keys
        if self.sources is not None:
            batch["source"] = self.sources
        if self.valid is not None:
            batch["valid"] = self.valid
        batch.update(fields)


def pack_small(batch: dict[str, Any]) -> None:
    """In a worker process: the batch's small tensors cross by value (:class:`Packed`)."""
    for name, value in batch.items():
        if (
            name != "pixel_values"
            and isinstance(value, torch.Tensor)
            and value.device.type == "cpu"
            and value.nbytes <= PACK_LIMIT
        ):
            batch[name] = Packed(value)
