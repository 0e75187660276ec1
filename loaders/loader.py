"""``make_loader``: the epoch plan + the worker stream, wired into a torch DataLoader.

The DataLoader runs with ``batch_size=None``: each worker yields whole batches planned so that
every rank gets exactly ``len(loader)`` batches. The epoch lives in shared memory so that
``set_epoch`` reaches persistent workers.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import random
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from loaders.plan import RankPlan, Uneven, num_batches, plan_epoch
from loaders.source import DatasetIndex, ShardAccess, resolve_source
from loaders.stream import BatchAssembler, DecodeSpec, buffer_shuffle, read_slices
from loaders.topology import Topology, cores_per_rank, detect_topology
from wdstool.errors import ConfigError
from wdstool.storage import DEFAULT_RETRY, RetryPolicy

log = logging.getLogger(__name__)


class Output(StrEnum):
    UINT8 = "uint8"
    FLOAT = "float"


class OnError(StrEnum):
    RAISE = "raise"
    SKIP = "skip"


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    batch_size: int = 64
    image_size: int = 224
    train: bool = True
    shuffle: bool = True
    shuffle_buffer: int = 2000
    seed: int = 0
    num_workers: int = 0
    uneven: Uneven = Uneven.PAD
    drop_last: bool = False
    output: Output = Output.UINT8
    on_error: OnError = OnError.RAISE

    def __post_init__(self) -> None:
        for name in ("uneven", "output", "on_error"):
            enum = {"uneven": Uneven, "output": Output, "on_error": OnError}[name]
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, enum(value))
            except ValueError:
                choices = ", ".join(repr(e.value) for e in enum)
                raise ConfigError(f"{name}={value!r} is not one of {choices}") from None
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.image_size < 8:
            raise ConfigError(f"image_size must be >= 8, got {self.image_size}")
        if self.shuffle_buffer < 0:
            raise ConfigError(f"shuffle_buffer must be >= 0, got {self.shuffle_buffer}")
        if self.num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {self.num_workers}")


class ShardStreamDataset(IterableDataset):
    """Yields this rank's batches for the current epoch; one worker's share in each worker."""

    def __init__(
        self,
        index: DatasetIndex,
        config: LoaderConfig,
        topology: Topology,
        *,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        access: ShardAccess | None = None,
    ) -> None:
        self.index = index
        self.config = config
        self.topology = topology
        self.transform = transform
        self.access = access or ShardAccess()
        # shared with (persistent) workers: [epoch]
        self._shared = mp.get_context().RawArray("q", 1)
        self._len = num_batches(
            index.num_samples,
            world_size=topology.world_size,
            batch_size=config.batch_size,
            uneven=config.uneven,
            drop_last=config.drop_last,
        )

    @property
    def epoch(self) -> int:
        return int(self._shared[0])

    def set_epoch(self, epoch: int) -> None:
        if epoch < 0:
            raise ConfigError(f"epoch must be >= 0, got {epoch}")
        self._shared[0] = epoch

    def __len__(self) -> int:
        return self._len

    def plan(self, epoch: int | None = None) -> RankPlan:
        c = self.config
        return plan_epoch(
            self.index.sizes,
            seed=c.seed,
            epoch=self.epoch if epoch is None else epoch,
            rank=self.topology.rank,
            world_size=self.topology.world_size,
            num_workers=c.num_workers,
            batch_size=c.batch_size,
            shuffle=c.shuffle,
            uneven=c.uneven,
            drop_last=c.drop_last,
        )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker = info.id if info is not None else 0
        nworkers = info.num_workers if info is not None else 0
        if nworkers != self.config.num_workers:
            raise ConfigError(
                f"dataset planned for {self.config.num_workers} workers but runs in a DataLoader "
                f"with {nworkers}; build the DataLoader with make_loader()"
            )
        c = self.config
        wplan = self.plan().workers[worker]
        samples = read_slices(wplan.slices, self.index, self.access)
        if c.shuffle and wplan.shuffle_seed is not None and c.shuffle_buffer > 1:
            samples = buffer_shuffle(
                samples,
                c.shuffle_buffer,
                random.Random(wplan.shuffle_seed),
                initial=min(c.shuffle_buffer, max(100, c.batch_size)),
            )
        aug_seed = (wplan.shuffle_seed or 0) ^ 0x5A5A_5A5A ^ (self.epoch << 20) ^ worker
        assembler = BatchAssembler(
            DecodeSpec(
                image_size=c.image_size,
                train=c.train,
                output=c.output.value,
                transform=self.transform,
                on_error=c.on_error.value,
            ),
            random.Random(f"aug:{c.seed}:{self.epoch}:{self.topology.rank}:{worker}:{aug_seed}"),
            shared=info is not None,
        )
        yield from assembler.batches(samples, wplan, c.batch_size)


class StreamingLoader:
    """What ``make_loader`` returns: iterate it for batches; ``set_epoch`` before each epoch."""

    def __init__(self, dataset: ShardStreamDataset, dataloader: DataLoader) -> None:
        self.dataset = dataset
        self.dataloader = dataloader
        self.num_replaced = 0
        self.batches_delivered = 0
        self.bytes_read = 0  # compressed bytes of the samples delivered (all epochs)

    def __len__(self) -> int:
        return len(self.dataset)

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch``: the same (seed, epoch, topology) gives the same order."""
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
        self.batches_delivered = 0
        for batch in self.dataloader:
            self.num_replaced += int(batch.pop("num_replaced", 0))
            self.bytes_read += int(batch.pop("num_bytes", 0))
            self.batches_delivered += 1
            yield batch
        if self.batches_delivered != len(self):
            raise RuntimeError(
                f"internal error: delivered {self.batches_delivered} batches, planned {len(self)}"
            )


def _worker_init(_worker_id: int) -> None:
    """Ctrl-C reaches the whole process group. torch's worker loop swallows KeyboardInterrupt and
    exits cleanly, which can leave the main process waiting for a batch forever; so workers
    ignore SIGINT and the main process, which gets the KeyboardInterrupt, shuts them down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def default_num_workers() -> int:
    """Worker processes per rank: the cores available to this rank, at most 8."""
    return min(8, cores_per_rank())


def make_loader(
    source: str | os.PathLike[str],
    batch_size: int = 64,
    *,
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
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    on_error: str = "raise",
    storage_options: dict[str, Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | str | None = None,
    retry: RetryPolicy | None = None,
    multiprocessing_context: str | None = None,
) -> StreamingLoader:
    """A streaming loader over WebDataset shards for one rank of a (torchrun) job.

    ``source``: an index.json path/URL, a folder or prefix holding one, or a brace pattern of
    shard URLs (``data/train-{000000..000099}.tar``; counts then come from a header-only scan).
    Batches are dicts: ``pixel_values`` uint8 [B,3,S,S] (or normalized float32 with
    ``output="float"``), ``labels`` int64 [B], ``keys`` list[str]. Every rank yields exactly
    ``len(loader)`` batches. Call ``loader.set_epoch(e)`` before each epoch.

    Remote sources (``s3://bucket/prefix``, any fsspec URL): ``storage_options`` as for s3fs
    (``endpoint_url``, ``key``/``secret``/``token``, ``profile``, ``anon``, ``client_kwargs``,
    ``config_kwargs``); the usual AWS variables apply. Each shard is one streaming GET, resumed
    at the byte offset already read after a dropped connection, timeout, 5xx or throttling
    (``retry``: a :class:`wdstool.storage.RetryPolicy`). ``cache_dir`` keeps a local copy of
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
    )
    if prefetch_factor < 1:
        raise ConfigError(f"prefetch_factor must be >= 1, got {prefetch_factor}")
    if transform is not None and not callable(transform):
        raise ConfigError("transform must be a callable taking a uint8 [3,H,W] tensor")
    access = ShardAccess(
        storage_options=storage_options,
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        cache_limit=cache_limit,
        retry=retry or DEFAULT_RETRY,
    )
    topology = detect_topology(rank, world_size)
    index = resolve_source(source, storage_options)
    dataset = ShardStreamDataset(index, config, topology, transform=transform, access=access)
    if len(dataset) == 0:
        raise ConfigError(
            f"{source}: {index.num_samples} samples over {topology.world_size} ranks give no "
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
    dataloader = DataLoader(
        dataset, batch_size=None, num_workers=workers, pin_memory=pin_memory, **kwargs
    )
    log.info(
        "loader: %d samples in %d shards, rank %d/%d, %d workers, %d batches of %d per epoch",
        index.num_samples,
        len(index.urls),
        topology.rank,
        topology.world_size,
        workers,
        len(dataset),
        batch_size,
    )
    return StreamingLoader(dataset, dataloader)


__all__ = ["LoaderConfig", "StreamingLoader", "default_num_workers", "make_loader"]
