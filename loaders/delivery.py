"""What a worker's batch is made of besides the decoding: where its tensors go (:class:`Slot`:
carved out of a pool slot, or allocated), what it carries besides pixels (:class:`BatchMeta`:
labels, keys, fields, sources, valid flags), and what crosses to the loader
(:class:`Delivery`: the batch and the worker's bookkeeping)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from loaders.pool import PACK_LIMIT, Packed, Pooled, new_batch


class Decoded(NamedTuple):
    """One sample as the assembler batches it."""

    image: Any  # the recipe's tensor per view; output="encoded": (bytes, Geometry)
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

    def __init__(self, assembler: Any, n: int) -> None:  # a loaders.batch.BatchAssembler
        self.pool, self.n = assembler.pool, n
        self.shared, self.channels_last = assembler.shared, assembler.spec.channels_last
        clips = assembler.spec.clips
        self.frames = clips.clips.frames if clips is not None else 0  # clips: [n,T,3,h,w]
        self.cthw = clips is not None and clips.clips.layout.value == "CTHW"
        self.slot = self.pool.get() if self.pool is not None else -1
        self.offset = 0
        self.coords: dict[int, Pooled] = {}  # id of a carved tensor -> its coordinates

    def tensor(self, size: Any, dtype: torch.dtype) -> tuple[torch.Tensor, Any]:
        """An [n,3,h,w] batch of ``size`` (a clips loader's: [n,T,3,h,w] or [n,3,T,h,w]; or
        [n] labels for ``size`` None), and what to send for it."""
        frames = self.frames if size is not None else 0
        if self.slot < 0:
            assert size is not None
            t = new_batch(self.n, size, self.shared, dtype, self.channels_last, frames, self.cthw)
            return t, t
        shared = self.pool.shared  # type: ignore[union-attr]
        t, coords, self.offset = shared.carve(
            self.slot, self.offset, self.n, size, dtype, self.channels_last, frames, self.cthw
        )
        self.coords[id(t)] = coords
        return t, coords

    def send(self, t: torch.Tensor) -> Any:
        """What crosses for ``t``: its coordinates if it was carved out of the slot."""
        return self.coords.get(id(t), t)


class BatchMeta:
    """Everything a batch carries besides the pixels, collected sample by sample: labels (when
    any source has them), keys, fields, sources and valid flags (when asked for), and which
    shards the batch's replaced samples came from."""

    def __init__(self, n: int, assembler: Any) -> None:  # a loaders.batch.BatchAssembler
        spec = assembler.spec
        self.assembler = assembler
        self.labels = torch.empty(n, dtype=torch.int64) if assembler._labelled else None
        self.keys: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self.ids = spec.source_ids
        self.sources = torch.empty(n, dtype=torch.int64) if self.ids is not None else None
        self.valid = torch.empty(n, dtype=torch.bool) if spec.with_valid else None
        assembler.replaced_from = {}
        assembler.replaced_why = {}

    def add(self, i: int, got: Decoded) -> None:
        _img, label, key, values, source, valid = got
        if self.labels is not None:
            self.labels[i] = label
        self.keys.append(key)
        if self.assembler._fielded:  # one row per sample, {} for a source without fields
            self.rows.append(values or {})
        if self.sources is not None:
            self.sources[i] = self.ids[source]  # type: ignore[index]
        if self.valid is not None:
            self.valid[i] = valid

    def into(self, batch: dict[str, Any], labels: Any) -> None:
        """Add the entries to ``batch`` (``labels`` as given: it may be pooled by now)."""
        if labels is not None:
            batch["labels"] = labels
        batch["keys"] = self.keys
        if self.sources is not None:
            batch["source"] = self.sources
        if self.valid is not None:
            batch["valid"] = self.valid
        batch.update(self.assembler._fields.collate(self.rows, self.assembler._field_names))
        if self.assembler.shared:  # in a worker process: small tensors cross by value
            for name, value in batch.items():
                if (
                    name != "pixel_values"
                    and isinstance(value, torch.Tensor)
                    and value.device.type == "cpu"
                    and value.nbytes <= PACK_LIMIT
                ):
                    batch[name] = Packed(value)
