"""``make_loader``: the epoch plan + the worker stream, wired into a torch DataLoader.

The DataLoader runs with ``batch_size=None``: each worker yields whole batches planned so that
every rank gets exactly ``len(loader)`` batches. The epoch lives in shared memory so that
``set_epoch`` reaches persistent workers.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing as mp
import os
import signal
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from loaders.plan import RankPlan, Segment, Uneven, num_batches, plan_epoch, plan_resumed
from loaders.source import DatasetIndex, ShardAccess, resolve_source
from loaders.stream import (
    BatchAssembler,
    BufferPool,
    DecodeSpec,
    Pooled,
    SharedPool,
    shard_reader,
    worker_stream,
)
from loaders.topology import Topology, cores_per_rank, detect_topology
from wdstool.base.errors import ConfigError
from wdstool.base.retry import DEFAULT_RETRY, RetryPolicy

log = logging.getLogger(__name__)


class Output(StrEnum):
    UINT8 = "uint8"
    FLOAT = "float"
    ENCODED = "encoded"  # compressed bytes + augmentation draws, for loaders.DeviceDecoder


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
    channels_last: bool = False

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
        # batch buffer slots per worker: 1 = the main process is done with it (BufferPool)
        self._pool_flags = mp.get_context().RawArray("b", max(1, config.num_workers) * POOL_SLOTS)
        self._pool: BufferPool | None = None
        # batch buffers the main process owns and the workers write (see SharedPool)
        self._shared_pool: SharedPool | None = None
        if config.num_workers > 0 and transform is None and config.output != Output.ENCODED:
            dtype = torch.float32 if config.output == Output.FLOAT else torch.uint8
            self._shared_pool = SharedPool(
                config.num_workers * POOL_SLOTS,
                config.batch_size,
                config.image_size,
                dtype,
                config.channels_last,
            )
        # set by StreamingLoader.load_state_dict before workers start
        self.resume: Resume | None = None
        self._resumed_plan: tuple[Resume, RankPlan] | None = None
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
        if self.resume is not None and self.resume.epoch == self.epoch:
            return self.plan().remaining_batches
        return self._len

    def _worker_pool(self, worker: int) -> BufferPool:
        if self._pool is None:  # one per worker process, kept across epochs
            self._pool = BufferPool(
                self._pool_flags, worker * POOL_SLOTS, POOL_SLOTS, self._shared_pool
            )
        return self._pool

    def plan(self, epoch: int | None = None) -> RankPlan:
        c = self.config
        epoch = self.epoch if epoch is None else epoch
        args = dict(
            seed=c.seed,
            epoch=epoch,
            rank=self.topology.rank,
            world_size=self.topology.world_size,
            num_workers=c.num_workers,
            batch_size=c.batch_size,
            shuffle=c.shuffle,
            uneven=c.uneven,
            drop_last=c.drop_last,
        )
        resume = self.resume
        if resume is None or resume.epoch != epoch:
            return plan_epoch(self.index.sizes, **args)  # type: ignore[arg-type]
        if self._resumed_plan is None or self._resumed_plan[0] != resume:
            plan = plan_resumed(
                self.index.sizes,
                resume.history,
                shuffle_buffer=c.shuffle_buffer,
                **args,  # type: ignore[arg-type]
            )
            self._resumed_plan = (resume, plan)
        return self._resumed_plan[1]

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
        plan = self.plan()
        wplan = plan.workers[(worker + plan.rotation) % len(plan.workers)]
        samples = worker_stream(
            wplan,
            shard_reader(self.index, self.access),
            shuffle_buffer=c.shuffle_buffer if c.shuffle else 0,
            batch_size=c.batch_size,
        )
        assembler = BatchAssembler(
            DecodeSpec(
                image_size=c.image_size,
                train=c.train,
                output=c.output.value,
                transform=self.transform,
                on_error=c.on_error.value,
                channels_last=c.channels_last,
            ),
            f"aug:{c.seed}:{self.epoch}",
            shared=info is not None,
            pool=self._worker_pool(worker) if info is not None else None,
        )
        yield from assembler.batches(samples, wplan, c.batch_size)


@dataclass(frozen=True)
class Resume:
    """Where an interrupted epoch stopped: the segments it ran (topology and batches each)."""

    epoch: int
    history: tuple[Segment, ...]


STATE_FORMAT = "wdstool.loader-state"
POOL_SLOTS = 8  # reusable batch buffers per worker (prefetch_factor 4 + batches in flight)
STATE_VERSION = 1


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
        self.num_replaced = 0
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
        expected = len(self)
        for batch in self.dataloader:
            self.num_replaced += int(batch.pop("num_replaced", 0))
            self.bytes_read += int(batch.pop("num_bytes", 0))
            slot = int(batch.pop("buffer_slot", -1))
            if batch.pop("pooled", False):
                labels, pixels = batch["labels"], batch["pixel_values"]
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
    def _segment(self, batches: int) -> Segment:
        c, t = self.config, self.topology
        return Segment(t.world_size, c.num_workers, c.batch_size, batches)

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable dict: epoch, batches delivered this epoch on this rank, the
        topology (and those of earlier segments of this epoch), seed, the data set's identity.
        Save it on every rank at the same step (as DDP training does)."""
        c = self.config
        ds = self.dataset
        resume = ds.resume if ds.resume is not None and ds.resume.epoch == ds.epoch else None
        if resume is None:
            history: list[Segment] = [self._segment(self.batches_delivered)]
        else:
            plan = ds.plan()
            history = list(resume.history)
            here = self._segment(0)
            last = history[-1]
            if (last.world_size, last.num_workers, last.batch_size) == (
                here.world_size,
                here.num_workers,
                here.batch_size,
            ):
                history[-1] = self._segment(plan.resume_at + self.batches_delivered)
            else:
                history.append(self._segment(self.batches_delivered))
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "dataset": ds.index.identity,
            "num_samples": ds.index.num_samples,
            "epoch": ds.epoch,
            "rank": self.topology.rank,
            "batches": history[-1].batches,
            "seed": c.seed,
            "shuffle": c.shuffle,
            "shuffle_buffer": c.shuffle_buffer,
            "uneven": c.uneven.value,
            "drop_last": c.drop_last,
            "segments": [
                {
                    "world_size": g.world_size,
                    "num_workers": g.num_workers,
                    "batch_size": g.batch_size,
                    "batches": g.batches,
                }
                for g in history
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch ``state`` was saved in; call before iterating. Raises ConfigError
        for a state of another data set, another version, or other shuffle settings."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ConfigError("not a wdstool loader state (missing 'format')")
        if state.get("version") != STATE_VERSION:
            raise ConfigError(
                f"loader state version {state.get('version')!r} is not supported "
                f"(this wdstool reads version {STATE_VERSION})"
            )
        ds, c = self.dataset, self.config
        if state.get("dataset") != ds.index.identity:
            raise ConfigError(
                "the loader state belongs to another data set (manifest identity "
                f"{str(state.get('dataset'))[:12]}..., this one {ds.index.identity[:12]}...); "
                "refusing to restart from zero silently"
            )
        for key, mine in (
            ("seed", c.seed),
            ("shuffle", c.shuffle),
            ("shuffle_buffer", c.shuffle_buffer),
            ("uneven", c.uneven.value),
            ("drop_last", c.drop_last),
        ):
            if state.get(key) != mine:
                raise ConfigError(
                    f"the loader state was saved with {key}={state.get(key)!r}; this loader has "
                    f"{key}={mine!r} (they must match to resume)"
                )
        try:
            epoch = int(state["epoch"])
            history = tuple(
                Segment(
                    int(g["world_size"]),
                    int(g["num_workers"]),
                    int(g["batch_size"]),
                    int(g["batches"]),
                )
                for g in state["segments"]
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"malformed loader state: {exc!r}") from None
        if not history or epoch < 0:
            raise ConfigError("malformed loader state: no segments")
        ds.set_epoch(epoch)
        ds.resume = Resume(epoch, history)
        ds.plan()  # validates the history against this data set now, not in a worker
        self.batches_delivered = 0
        if self._started and self._dataloader_kwargs is not None:
            # persistent workers hold the old dataset copy: start fresh ones
            self.dataloader = DataLoader(ds, **self._dataloader_kwargs)


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
    channels_last: bool = False,
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
    ``output="float"``), ``labels`` int64 [B], ``keys`` list[str]. ``output="encoded"``: the
    workers only parse headers and draw augmentations; batches carry ``encoded`` (uint8 bytes),
    ``offsets``, ``crops``, ``flips`` for :class:`loaders.DeviceDecoder`, which decodes and
    augments on the GPU (nvJPEG). ``channels_last=True``: ``pixel_values`` keeps its shape and
    values but is laid out [B,S,S,3] in memory (``torch.channels_last`` strides), what a
    channels-last model consumes after ``.to(device, non_blocking=True)`` with no conversion;
    the workers' resize writes that layout directly (~40% less resize time here). Every rank
    yields exactly
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
    kwargs.update(batch_size=None, num_workers=workers, pin_memory=pin_memory)
    dataloader = DataLoader(dataset, **kwargs)
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
    return StreamingLoader(dataset, dataloader, kwargs)


__all__ = ["LoaderConfig", "StreamingLoader", "default_num_workers", "make_loader"]
