"""The torch ``IterableDataset`` inside the DataLoader: this rank's plan, one worker's share each.

It yields whole batches (the DataLoader runs with ``batch_size=None``). The epoch lives in
shared memory so that ``set_epoch`` reaches persistent workers; a resumed epoch's plan comes from
:class:`Resume` (set by ``StreamingLoader.load_state_dict`` before the workers start), with the
mixture that epoch was planned with, which may differ from the loader's own from the next epoch.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from loaders.batch import BatchAssembler
from loaders.config import LoaderConfig, OnError
from loaders.delivery import Delivery
from loaders.kinds import kind_for
from loaders.plan import (
    MixSource,
    Mixture,
    RankPlan,
    Segment,
    Split,
    Topology,
    batches_of,
    plan_epoch,
    plan_resumed,
    samples_per_rank,
    shard_slack,
)
from loaders.pool import BufferPool, SharedPool
from loaders.read import SourceReader, shard_reader, worker_stream
from loaders.recipe import Recipe, Where
from loaders.recipe.book import Recipes
from loaders.schema import SampleSchema
from loaders.source import DatasetIndex, ShardAccess, identity_key
from wdstool.base.errors import ConfigError
from wdstool.format.images import IMAGE_EXTENSIONS, WithNumberedImages
from wdstool.format.video import VIDEO_EXTENSIONS

POOL_SLOTS = 8  # reusable batch buffers per worker (prefetch_factor 4 + batches in flight)


@dataclass(frozen=True)
class LoaderSource:
    """One data set the loader reads: where (index, storage), what a sample carries (schema),
    and its weight in the mixture."""

    url: str
    index: DatasetIndex
    access: ShardAccess
    schema: SampleSchema
    weight: float = 1.0
    lengths: Any = field(default=None, compare=False, repr=False)  # tokens a sample (packing)

    @property
    def key(self) -> int:
        """A stable integer from the data set's identity: seeds the source's walk."""
        return identity_key(self.index.identity)

    def reader(self) -> SourceReader:
        """Image members are read lazily (out of a mapping, local shards) unless a field or the
        label asks for them as bytes too."""
        named = {spec.ext for _n, spec in self.schema.fields}
        if self.schema.label is not None:
            named.add(self.schema.label.ext)
        lazy = (IMAGE_EXTENSIONS | VIDEO_EXTENSIONS) - named
        if self.schema.numbered:
            lazy = WithNumberedImages(lazy)
        return SourceReader(self.index, self.access, self.schema.extensions, lazy)


@dataclass(frozen=True)
class Resume:
    """Where an interrupted epoch stopped: the segments it ran (topology and batches each), the
    mixture it was planned with, and which of the loader's sources each of that mixture's
    sources is (``sources[i]``: an index into the loader's sources)."""

    epoch: int
    history: tuple[Segment, ...]
    mixture: Mixture
    sources: tuple[int, ...]


class ShardStreamDataset(IterableDataset):
    """Yields this rank's batches for the current epoch; one worker's share in each worker."""

    def __init__(
        self, sources: Sequence[LoaderSource], config: LoaderConfig, topology: Topology
    ) -> None:
        """``config``: everything ``make_loader`` was given (``loaders.config``), its kind of
        output (``loaders.kinds``) among it; ``topology``: this rank and its worker count (the
        batch buffers are laid out for ``config.max_workers`` if more: ``reconfigure``)."""
        self.sources = tuple(sources)
        self.config = config
        self.topology = topology
        self.kind = kind_for(config)
        self.mixture = Mixture(
            tuple(MixSource(s.index.sizes, s.weight, s.key) for s in self.sources),
            config.epoch_size,
            repeats=config.repeats,
        )
        # shared with (persistent) workers: [epoch]
        self._shared = mp.get_context().RawArray("q", 1)
        # batch buffer slots per worker, one flag byte each (loaders.pool: FREE, OUT, HELD)
        streams = max(topology.streams, config.max_workers)
        self._pool_flags = mp.get_context().RawArray("b", streams * POOL_SLOTS)
        # batch buffers the main process owns and the workers write (see SharedPool)
        self._shared_pool: SharedPool | None = None
        self._pools: dict[int, BufferPool] = {}
        self._batch_nbytes = self.kind.slot_bytes(config)
        self._packs = bool(getattr(self.kind, "plans_itself", False))
        self._packed_plan: tuple[Any, Any] | None = None
        # set by StreamingLoader.load_state_dict before workers start
        self.resume: Resume | None = None
        self._resumed_plan: tuple[Resume, RankPlan] | None = None
        spec = config.epoch
        whole = spec.split is Split.SHARDS
        if whole and self._packs:
            raise ConfigError(
                "split='shards' cuts ranks' shares between shards; packed sequences are "
                "planned by token counts: use split='samples'"
            )
        per_rank = samples_per_rank(
            self.mixture.total,
            world_size=topology.world_size,
            uneven=spec.uneven,
            slack=shard_slack(self.mixture) if whole else 0,
        )
        self._len = batches_of(per_rank, spec.batch_size, spec.drop_last)

    def ensure_pool(self) -> None:
        """Allocate the batch slots, in the main process before a pass starts its workers
        (they inherit them). Not at construction: torch's shared storage is resident as soon as
        it exists (~0.5 GB for 8 workers at batch 64 and 224 px), so a loader made and never
        iterated (planning, ``len``, a rank's resume check) held it for nothing."""
        if self._shared_pool is None and self.topology.num_workers > 0 and self._batch_nbytes:
            self._shared_pool = SharedPool(
                len(self._pool_flags), self._batch_nbytes, self._pool_flags
            )

    @property
    def recipes(self) -> Recipes:
        return self.config.recipes

    @property
    def shared_pool(self) -> SharedPool | None:
        """The batch slots (None before the first pass, or where batches are allocated)."""
        return self._shared_pool

    def batch_nbytes(self) -> int:
        """Bytes of one batch's pixels (0 where the size is not known ahead)."""
        return self._batch_nbytes

    def reconfigure(self, num_workers: int, prefetch_factor: int) -> None:
        """Plan the next pass for ``num_workers`` workers with ``prefetch_factor`` (between
        passes; the batch buffers were laid out for them: ``max_workers``)."""
        if num_workers * POOL_SLOTS > len(self._pool_flags):
            raise ConfigError(f"internal error: no batch buffers for {num_workers} workers")
        self.topology = replace(self.topology, num_workers=num_workers)
        workers = replace(
            self.config.workers, num_workers=num_workers, prefetch_factor=prefetch_factor
        )
        self.config = replace(self.config, workers=workers)
        self._pools = {}
        self._resumed_plan = None

    def describe(self) -> str:
        """One line for the log: what an epoch holds, where it runs, and the recipe."""
        t, shards = self.topology, sum(len(s.index.urls) for s in self.sources)
        return (
            f"{self.mixture.total} samples per epoch from {shards} shards of "
            f"{len(self.sources)} sources, rank {t.rank}/{t.world_size}, {t.num_workers} "
            f"workers, {self._len} batches of {self.config.epoch.batch_size} per epoch; "
            f"{self.recipes}" + (f"; {what}" if (what := self.kind.describe(self.config)) else "")
        )

    @property
    def index(self) -> DatasetIndex:
        """The first source's index (the only one of a single-source loader)."""
        return self.sources[0].index

    @property
    def epoch(self) -> int:
        return int(self._shared[0])

    @property
    def recipe(self) -> Recipe:
        """The current epoch's recipe (the first view's, with views)."""
        return self.recipes.at(self.epoch)[0]

    def set_epoch(self, epoch: int) -> None:
        if epoch < 0:
            raise ConfigError(f"epoch must be >= 0, got {epoch}")
        self._shared[0] = epoch

    def __len__(self) -> int:
        """Batches of the current epoch on this rank, those delivered before the interruption of
        a resumed epoch included: what an uninterrupted run counts (the convention of torch's
        and torchdata's DataLoaders, which Lightning relies on when it restores a checkpoint).
        A resumed epoch yields only the last ``remaining_batches()`` of them."""
        resume = self.resumed()
        if resume is None:
            return self.plan().num_batches if self._packs else self._len
        return self.batches_before() + self.plan().remaining_batches

    def batches_before(self) -> int:
        """Batches of the current epoch this rank had delivered before it was resumed (0 in an
        epoch that was not interrupted): the sum over the epoch's earlier segments."""
        resume = self.resumed()
        return 0 if resume is None else sum(g.batches for g in resume.history)

    def remaining_batches(self) -> int:
        """Batches one pass over the current epoch yields on this rank."""
        if self.resumed() is None and not self._packs:
            return self._len
        return self.plan().remaining_batches

    def _worker_pool(self, worker: int) -> BufferPool | None:
        """The batch slots of one worker process (or thread), kept across epochs (None: no
        shared pool, batches are allocated)."""
        if self._shared_pool is None:
            return None
        if worker not in self._pools:
            self._pools[worker] = BufferPool(self._shared_pool, worker * POOL_SLOTS, POOL_SLOTS)
        return self._pools[worker]

    def planned_samples(self) -> int:
        """Samples this rank's plan of the current epoch holds (a packed plan: its entries)."""
        plan = self.plan()
        if self._packs:
            return sum(len(r) for w in plan.workers for b in w.batches() for r in b)  # type: ignore[attr-defined]
        return plan.num_samples

    def resumed(self, epoch: int | None = None) -> Resume | None:
        """The resume state if ``epoch`` (default: the current one) is the interrupted one."""
        epoch = self.epoch if epoch is None else epoch
        return self.resume if self.resume is not None and self.resume.epoch == epoch else None

    def plan(self, epoch: int | None = None) -> RankPlan:
        """This rank's plan for ``epoch`` (default: the current one): a fresh epoch's, or the
        rest of the interrupted one."""
        spec = self.config.epoch.at(self.epoch if epoch is None else epoch)
        resume = self.resumed(spec.epoch)
        if self._packs:  # a kind that plans its batches itself (packed sequences)
            key = (spec, resume, self.topology)
            if self._packed_plan is None or self._packed_plan[0] != key:
                self._packed_plan = (key, self.kind.epoch_plan(self, spec, resume))  # type: ignore[attr-defined]
            return self._packed_plan[1]  # type: ignore[no-any-return]
        if resume is None:
            return plan_epoch(self.mixture, spec, self.topology)
        if self._resumed_plan is None or self._resumed_plan[0] != resume:
            plan = plan_resumed(resume.mixture, resume.history, spec, self.topology)
            self._resumed_plan = (resume, plan)
        return self._resumed_plan[1]

    def __iter__(self) -> Iterator[Delivery]:
        """In a DataLoader: this worker's batches (worker i serves plan worker i + rotation)."""
        info = get_worker_info()
        nworkers = info.num_workers if info is not None else 0
        if nworkers != self.topology.num_workers:
            raise ConfigError(
                f"dataset planned for {self.topology.num_workers} workers but runs in a "
                f"DataLoader with {nworkers}; build the DataLoader with make_loader()"
            )
        if info is None:
            yield from self.stream(0, pooled=False)
            return
        plan = self.plan()
        yield from self.stream((info.id + plan.rotation) % len(plan.workers), slot=info.id)

    def stream(
        self, plan_worker: int, *, slot: int | None = None, pooled: bool = True
    ) -> Iterator[Delivery]:
        """The batches of one plan worker this epoch: what a DataLoader worker process, or a
        decode thread (``worker_mode="thread"``), runs. ``slot``: whose batch buffers to use
        (default: the plan worker's); ``pooled``: buffers in the shared pool (a worker process
        or thread) or plain tensors (no workers)."""
        spec, b = self.config.epoch, self.config.batch
        plan = self.plan()
        resume = self.resumed()
        # the plan's source i is the loader's source ids[i] (another mixture after a resume)
        ids = resume.sources if resume is not None else tuple(range(len(self.sources)))
        sources = [self.sources[i] for i in ids]
        wplan = plan.workers[plan_worker]
        skip = b.on_error is OnError.SKIP
        read_run = shard_reader([s.reader() for s in sources], skip_damaged=skip)
        kind = self.kind(self.config, self.recipes.at(self.epoch))
        if self._packs:  # the batches' samples in their order, the worker's windows read once
            mixture = resume.mixture if resume is not None else self.mixture
            remote = [s.access.is_remote(s.index.urls[0]) for s in sources]
            samples, sizes, layouts = kind.worker_samples(wplan, mixture, read_run, remote)  # type: ignore[attr-defined]
            kind.layouts = iter(layouts)  # type: ignore[attr-defined]
        else:
            samples = worker_stream(
                wplan, read_run, shuffle_buffer=spec.buffer, batch_size=spec.batch_size
            )
            sizes = wplan.batch_sizes(spec.batch_size)
        in_worker = get_worker_info() is not None
        pool = self._worker_pool(plan_worker if slot is None else slot) if pooled else None
        if pool is not None:  # slots of an abandoned pass that never reached the loop
            pool.reclaim()
        assembler = BatchAssembler(
            self.config,
            kind,
            schemas=tuple(s.schema for s in sources),
            source_ids=ids if self.config.with_source else None,
            where=Where.WORKER if in_worker else Where.THREAD if pooled else Where.MAIN,
            aug_seed=f"aug:{spec.seed}:{self.epoch}",
            shared=pooled and in_worker,
            pool=pool,
        )
        yield from assembler.batches(samples, sizes, wplan.worker)
