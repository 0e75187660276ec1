"""``make_loader``: the dataset wired into a torch DataLoader, and the loader users iterate.

The DataLoader runs with ``batch_size=None``: each worker yields whole batches planned so that
every rank gets exactly ``len(loader)`` batches. :class:`StreamingLoader` resolves pooled
batches, recycles their buffers, and saves and restores the epoch (``loaders.state``).
"""

from __future__ import annotations

import gc
import logging
import math
import os
import signal
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader

from loaders.config import LoaderConfig
from loaders.dataset import ShardStreamDataset
from loaders.mixing import SourceArg, loader_sources
from loaders.pool import Pooled
from loaders.schema import FieldsFn
from loaders.source import ShardAccess
from loaders.state import restore_state, save_state
from loaders.topology import Topology, cores_per_rank, detect_topology
from wdstool.base.errors import ConfigError, ShardError
from wdstool.base.retry import DEFAULT_RETRY, RetryPolicy

log = logging.getLogger(__name__)


class StreamingLoader:
    """What ``make_loader`` returns: iterate it for batches; ``set_epoch`` before each epoch.

    ``state_dict()`` / ``load_state_dict(state)`` resume an epoch exactly where it stopped, on
    the same topology (the very batches an uninterrupted run would deliver next) or on another
    world size, worker count or per-rank batch size (every sample not yet delivered this epoch
    is delivered exactly once; the next epoch is a fresh one of the new topology).
    """

    def __init__(
        self,
        dataset: ShardStreamDataset,
        dataloader: DataLoader,
        dataloader_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.dataset = dataset
        self.dataloader = dataloader
        self._dataloader_kwargs = dataloader_kwargs
        self._started = False
        self.num_replaced = 0  # all epochs
        self.replaced_from: dict[str, int] = {}  # this epoch: shard URL -> samples replaced
        self._outstanding: list[tuple[weakref.ref[torch.Tensor], int]] = []
        self.buffers_returned = 0  # batch buffers handed back to workers for reuse
        self.batches_delivered = 0  # in the current pass over the loader
        self.bytes_read = 0  # compressed bytes of the samples delivered (all epochs)

    def __len__(self) -> int:
        return len(self.dataset)

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch``: the same (seed, epoch, topology) gives the same order."""
        if epoch != self.dataset.epoch:
            self.batches_delivered = 0
        self.dataset.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self.dataset.epoch

    @property
    def config(self) -> LoaderConfig:
        return self.dataset.config

    @property
    def topology(self) -> Topology:
        return self.dataset.topology

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._started = True
        self.batches_delivered = 0
        self.replaced_from = {}
        expected = len(self)
        budget = self._budget()
        for batch in self.dataloader:
            replaced = int(batch.pop("num_replaced", 0))
            self.num_replaced += replaced
            for url, n in batch.pop("replaced_from", {}).items():
                self.replaced_from[url] = self.replaced_from.get(url, 0) + n
            if replaced and budget is not None and sum(self.replaced_from.values()) > budget:
                raise ShardError(
                    f"rank {self.topology.rank}: {sum(self.replaced_from.values())} samples "
                    f"replaced in epoch {self.epoch}, over max_replaced={self.config.max_replaced} "
                    f"({budget} samples): {_where(self.replaced_from)}"
                )
            self.bytes_read += int(batch.pop("num_bytes", 0))
            slot = int(batch.pop("buffer_slot", -1))
            if batch.pop("pooled", False):
                labels, pixels = batch.get("labels"), batch["pixel_values"]
                if isinstance(labels, Pooled):
                    batch["labels"] = labels.resolve().clone()
                if isinstance(pixels, Pooled):
                    batch["pixel_values"] = pixels.resolve()  # a view of the pool: recycled later
                else:  # the pin-memory thread already copied the batch out of the pool
                    self.dataset._pool_flags[slot] = 1
                    self.buffers_returned += 1
                    slot = -1
            self._recycle(slot, batch.get("pixel_values"))
            self.batches_delivered += 1
            yield batch
        if self.batches_delivered != expected:
            raise RuntimeError(
                f"internal error: delivered {self.batches_delivered} batches, planned {expected}"
            )
        if self.replaced_from:
            log.warning(
                "epoch %d, rank %d: replaced %d unreadable samples (on_error='skip'): %s",
                self.epoch,
                self.topology.rank,
                sum(self.replaced_from.values()),
                _where(self.replaced_from),
            )

    def _budget(self) -> int | None:
        """How many samples this rank may replace this epoch (``max_replaced``), or None."""
        limit = self.config.max_replaced
        if limit is None:
            return None
        if isinstance(limit, float):
            return math.floor(limit * self.dataset.plan().num_samples)
        return limit

    def _recycle(self, slot: int, pixels: torch.Tensor | None) -> None:
        """Give workers back the buffers of batches nobody references any more (a view keeps
        its base tensor alive, so a dead weak reference means no view is left either)."""
        flags = self.dataset._pool_flags
        still = []
        for ref, s in self._outstanding:
            if ref() is None:
                flags[s] = 1
                self.buffers_returned += 1
            else:
                still.append((ref, s))
        self._outstanding = still
        if slot >= 0 and pixels is not None:
            self._outstanding.append((weakref.ref(pixels), slot))

    # --- resume --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable dict: epoch, batches delivered this epoch on this rank, the
        topology (and those of earlier segments of this epoch), seed, the data set's identity.
        Save it on every rank at the same step (as DDP training does)."""
        return save_state(self.dataset, self.batches_delivered)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch ``state`` was saved in; call before iterating. Raises ConfigError
        for a state of another data set, another version, or other shuffle settings."""
        restore_state(self.dataset, state)
        self.batches_delivered = 0
        if self._started and self._dataloader_kwargs is not None:
            # persistent workers hold the old dataset copy: start fresh ones
            self.dataloader = DataLoader(self.dataset, **self._dataloader_kwargs)


def _where(counts: dict[str, int], most: int = 5) -> str:
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{url} ({n})" for url, n in top[:most])
    return text + (f" and {len(top) - most} more shards" if len(top) > most else "")


def _worker_init(_worker_id: int) -> None:
    """Ctrl-C reaches the whole process group. torch's worker loop swallows KeyboardInterrupt and
    exits cleanly, which can leave the main process waiting for a batch forever; so workers
    ignore SIGINT and the main process, which gets the KeyboardInterrupt, shuts them down.

    Everything a worker inherits (torch's module graph: ~10^5 objects) moves to the garbage
    collector's permanent generation: its older-generation passes walked all of it, ~2% of a
    worker's time here, for objects that live as long as the process anyway."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()


def default_num_workers() -> int:
    """Worker processes per rank: the cores available to this rank, at most 8."""
    return min(8, cores_per_rank())


def make_loader(
    source: SourceArg,
    batch_size: int = 64,
    *,
    label: str | None = "cls",
    fields: Mapping[str, str] | None = None,
    fields_fn: FieldsFn | None = None,
    epoch_size: int | None = None,
    image_size: int = 224,
    train: bool = True,
    shuffle: bool = True,
    shuffle_buffer: int = 2000,
    seed: int = 0,
    num_workers: int | None = None,
    prefetch_factor: int = 4,
    pin_memory: bool | None = None,
    persistent_workers: bool = True,
    rank: int | None = None,
    world_size: int | None = None,
    uneven: str = "pad",
    drop_last: bool = False,
    output: str = "uint8",
    channels_last: bool = False,
    scaled_decode: bool = True,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    on_error: str = "raise",
    max_replaced: int | float | None = None,
    storage_options: dict[str, Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | str | None = None,
    retry: RetryPolicy | None = None,
    multiprocessing_context: str | None = None,
) -> StreamingLoader:
    """A streaming loader over WebDataset shards for one rank of a (torchrun) job.

    ``source``: an index.json path/URL, a folder or prefix holding one, a folder or prefix of
    ``.tar`` shards without one, or a brace pattern of shard URLs
    (``data/train-{000000..000099}.tar``; counts then come from a header-only scan).
    Batches are dicts: ``pixel_values`` uint8 [B,3,S,S] (or normalized float32 with
    ``output="float"``), ``labels`` int64 [B], ``keys`` list[str], and one entry per field.

    What a sample carries: ``label`` is ``"cls"`` (the ``.cls`` member, an int; the default),
    ``"json:a.b"`` (an int at that key path inside the sample's ``.json``) or ``None`` (no label:
    batches have no ``labels``). ``fields`` maps batch keys to member specs, delivered as lists
    aligned with ``pixel_values``: ``"txt"`` -> str, ``"json"`` -> the parsed object,
    ``"json:PATH"`` -> the value at that path, any other extension -> bytes (never unpickled);
    ``None`` where a sample lacks the member. ``fields_fn`` (picklable, run in the workers) maps
    each sample's dict of requested fields to the dict the batch carries: tensor values are
    stacked into batch tensors (tokenized captions), others listed. A bad ``.json``, a label that
    is not an int or an exception in ``fields_fn`` is a bad sample (``on_error``). Members that
    no spec names are never read. ``output="encoded"``: the
    workers only parse headers and draw augmentations; batches carry ``encoded`` (uint8 bytes),
    ``offsets``, ``crops``, ``flips`` for :class:`loaders.DeviceDecoder`, which decodes and
    augments on the GPU (nvJPEG). ``channels_last=True``: ``pixel_values`` keeps its shape and
    values but is laid out [B,S,S,3] in memory (``torch.channels_last`` strides), what a
    channels-last model consumes after ``.to(device, non_blocking=True)`` with no conversion;
    the workers' resize writes that layout directly (~40% less resize time here).
    ``scaled_decode=True`` (default): a JPEG crop (train) or centre region (eval) more than
    twice ``image_size`` on both sides is decoded at 1/2, 1/4 or 1/8 scale in the DCT domain
    (the largest reduction that keeps it >= ``image_size``), then resized as usual: several
    times less work on large images, slightly different pixels there; ``False`` keeps the
    exact pixels of a full-scale decode. Every rank yields exactly
    ``len(loader)`` batches. Call ``loader.set_epoch(e)`` before each epoch.

    Remote sources (``s3://bucket/prefix``, any fsspec URL): ``storage_options`` as for s3fs
    (``endpoint_url``, ``key``/``secret``/``token``, ``profile``, ``anon``, ``client_kwargs``,
    ``config_kwargs``); the usual AWS variables apply. Each shard is one streaming GET, resumed
    at the byte offset already read after a dropped connection, timeout, 5xx or throttling
    (``retry``: a :class:`wdstool.base.retry.RetryPolicy`). ``cache_dir`` keeps a local copy of
    every shard read (``cache_limit``: bytes or "50GB", least recently used evicted), shared
    safely by all workers and ranks on the host.
    """
    workers = default_num_workers() if num_workers is None else num_workers
    config = LoaderConfig(
        batch_size=batch_size,
        image_size=image_size,
        train=train,
        shuffle=shuffle,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        num_workers=workers,
        uneven=uneven,
        drop_last=drop_last,
        output=output,
        on_error=on_error,
        channels_last=channels_last,
        scaled_decode=scaled_decode,
        max_replaced=max_replaced,
    )
    if prefetch_factor < 1:
        raise ConfigError(f"prefetch_factor must be >= 1, got {prefetch_factor}")
    if transform is not None and not callable(transform):
        raise ConfigError("transform must be a callable taking a uint8 [3,H,W] tensor")
    if transform is not None and output == "encoded":
        raise ConfigError(
            "transform needs decoded pixels in the workers; output='encoded' leaves decoding "
            "to loaders.DeviceDecoder (apply your transform after it)"
        )
    access = ShardAccess(
        storage_options=storage_options,
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        cache_limit=cache_limit,
        retry=retry or DEFAULT_RETRY,
    )
    topology = detect_topology(rank, world_size)
    sources, with_source = loader_sources(
        source,
        label=label,
        fields=fields,
        fields_fn=fields_fn,
        storage_options=storage_options,
        access=access,
    )
    dataset = ShardStreamDataset(
        sources,
        config,
        topology,
        transform=transform,
        epoch_size=epoch_size,
        with_source=with_source,
    )
    total = dataset.mixture.total
    if len(dataset) == 0:
        raise ConfigError(
            f"{source}: {total} samples over {topology.world_size} ranks give no "
            f"batch of {batch_size} with drop_last=True; lower batch_size or set drop_last=False"
        )
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    kwargs: dict[str, Any] = {}
    if workers > 0:
        kwargs.update(
            worker_init_fn=_worker_init,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            multiprocessing_context=multiprocessing_context,
        )
    kwargs.update(batch_size=None, num_workers=workers, pin_memory=pin_memory)
    dataloader = DataLoader(dataset, **kwargs)
    log.info(
        "loader: %d samples per epoch from %d shards of %d sources, rank %d/%d, %d workers, "
        "%d batches of %d per epoch",
        total,
        sum(len(s.index.urls) for s in sources),
        len(sources),
        topology.rank,
        topology.world_size,
        workers,
        len(dataset),
        batch_size,
    )
    return StreamingLoader(dataset, dataloader, kwargs)


__all__ = ["LoaderConfig", "StreamingLoader", "default_num_workers", "make_loader"]
