"""The torch ``IterableDataset`` inside the DataLoader: this rank's plan, one worker's share each.

It yields whole batches (the DataLoader runs with ``batch_size=None``). The epoch lives in
shared memory so that ``set_epoch`` reaches persistent workers; a resumed epoch's plan comes from
:class:`Resume` (set by ``StreamingLoader.load_state_dict`` before the workers start).
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from loaders.batch import BatchAssembler, DecodeSpec
from loaders.config import LoaderConfig, Output
from loaders.plan import RankPlan, Segment, num_batches, plan_epoch, plan_resumed
from loaders.pool import BufferPool, SharedPool
from loaders.read import shard_reader, worker_stream
from loaders.schema import SampleSchema
from loaders.source import DatasetIndex, ShardAccess
from loaders.topology import Topology
from wdstool.base.errors import ConfigError

POOL_SLOTS = 8  # reusable batch buffers per worker (prefetch_factor 4 + batches in flight)


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
        schema: SampleSchema | None = None,
    ) -> None:
        self.index = index
        self.config = config
        self.topology = topology
        self.transform = transform
        self.schema = schema or SampleSchema()
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
            shard_reader(self.index, self.access, self.schema.extensions),
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
                schema=self.schema,
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
