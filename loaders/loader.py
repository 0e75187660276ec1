"""``StreamingLoader``: what ``make_loader`` returns (``loaders.make``).

It iterates the DataLoader (or the decode threads), resolves pooled batches and recycles their
buffers, accounts for replaced samples (``max_replaced``), and saves and restores the epoch
(``loaders.state``). ``len()`` counts the whole epoch; ``sampler.set_epoch`` is Lightning's hook.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import signal
import time
import weakref
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
from torch.utils.data import DataLoader

from loaders.config import LoaderConfig, WorkerMode
from loaders.dataset import ShardStreamDataset
from loaders.delivery import Delivery
from loaders.monitor.autotune import Autotuner, Change
from loaders.monitor.stats import Meter
from loaders.pool import Packed, Pooled
from loaders.recipe import Recipe
from loaders.state import restore_state, save_state
from loaders.threads import ThreadedBatches
from loaders.topology import Topology, check_topology
from loaders.watching import Watching, ready_probe
from wdstool.base import counters
from wdstool.base.errors import ShardError

log = logging.getLogger(__name__)


def _worker_init(_worker_id: int) -> None:
    """Ctrl-C reaches the whole process group. torch's worker loop swallows KeyboardInterrupt and
    exits cleanly, which can leave the main process waiting for a batch forever; so workers
    ignore SIGINT and the main process, which gets the KeyboardInterrupt, shuts them down.

    Everything a worker inherits (torch's module graph: ~10^5 objects) moves to the garbage
    collector's permanent generation: its older-generation passes walked all of it, ~2% of a
    worker's time here, for objects that live as long as the process anyway."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()


class StreamingLoader(Watching):
    """What ``make_loader`` returns: iterate it for batches; ``set_epoch`` before each epoch.

    ``state_dict()`` / ``load_state_dict(state)`` resume an epoch exactly where it stopped, on
    the same topology (the very batches an uninterrupted run would deliver next) or on another
    world size, worker count or per-rank batch size (every sample not yet delivered this epoch
    is delivered exactly once; the next epoch is a fresh one of the new topology). They follow
    torchdata's ``Stateful`` protocol, which Lightning checks to save and restore loaders with
    its checkpoints. ``len()`` counts the whole epoch, the batches delivered before a resume
    included; a resumed epoch yields the rest, from batch ``start_batch`` on.
    """

    def __init__(
        self,
        dataset: ShardStreamDataset,
        dataloader: DataLoader,
        dataloader_kwargs: dict[str, Any] | None = None,
        *,
        detected: bool = False,
    ) -> None:
        self.dataset = dataset
        self._holder: list[Any] = [dataloader]  # what the finalizer below stops
        # A loader dropped inside a reference cycle is freed by the garbage collector, which
        # finalizes the DataLoader iterator's queues before the iterator can stop its persistent
        # workers: each then takes torch's 5 s join timeout and a SIGTERM (a torch DataLoader in
        # a cycle does the same). This callback runs before any of that, and stops them cleanly.
        weakref.finalize(self, _stop_workers, self._holder).atexit = False
        self._dataloader_kwargs = dataloader_kwargs
        self.pin_memory = False  # pin batches here (worker_mode="thread": no pin-memory thread)
        self._detected = detected  # the topology came from the environment, not arguments
        self._started = False
        self.num_replaced = 0  # all epochs
        self.replaced_from: dict[str, int] = {}  # this epoch: shard URL -> samples replaced
        self.replaced_why: dict[str, str] = {}  # this epoch: shard URL -> why (first reason)
        self._outstanding: list[tuple[list[weakref.ref[torch.Tensor]], int]] = []
        self.buffers_returned = 0  # batch buffers handed back to workers for reuse
        self.batches_delivered = 0  # in the current pass over the loader
        self.bytes_read = 0  # compressed bytes of the samples delivered (all epochs)
        self.meter: Meter | None = Meter() if dataset.config.stats else None
        self.exporters: list[Any] = []  # loaders.monitor.exporters: called as batches go by
        self._live: Any = None  # the DataLoader iterator of the pass running
        self.autotuner: Autotuner | None = None  # for "auto" settings

    @property
    def dataloader(self) -> Any:
        """The torch DataLoader (or the decode threads) the batches come from."""
        return self._holder[0]

    @dataloader.setter
    def dataloader(self, value: Any) -> None:
        self._holder[0] = value

    @classmethod
    def start(cls, dataset: ShardStreamDataset, *, detected: bool = False) -> StreamingLoader:
        """The loader over ``dataset``: its batches through a torch DataLoader with
        ``batch_size=None`` (the workers batch), or through decode threads
        (``worker_mode="thread"``), as ``dataset.config.workers`` says. ``detected``: the
        topology came from the environment (checked again at the first batch)."""
        w = dataset.config.workers
        pin = torch.cuda.is_available() if w.pin_memory is None else w.pin_memory
        if w.mode is WorkerMode.THREAD and w.num_workers > 0:
            loader = cls(dataset, ThreadedBatches(dataset, w.prefetch_factor), detected=detected)
            loader.pin_memory = pin
            return loader
        kwargs: dict[str, Any] = dict(batch_size=None, num_workers=w.num_workers, pin_memory=pin)
        if w.num_workers > 0:
            kwargs.update(
                worker_init_fn=_worker_init,
                prefetch_factor=w.prefetch_factor,
                persistent_workers=w.persistent,
                multiprocessing_context=w.context,
            )
        return cls(dataset, DataLoader(dataset, **kwargs), kwargs, detected=detected)

    def __len__(self) -> int:
        """Batches of the current epoch on this rank, equal on every rank; after
        ``load_state_dict`` those delivered before the interruption included (what an
        uninterrupted run counts, and what Lightning expects when it restores a checkpoint)."""
        return len(self.dataset)

    @property
    def start_batch(self) -> int:
        """The index of the first batch a pass over the current epoch yields: 0, or after
        ``load_state_dict`` the batches of the interrupted epoch already delivered. A pass
        yields ``len(loader) - start_batch`` batches."""
        return self.dataset.batches_before()

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch``: the same (seed, epoch, topology) gives the same order."""
        if epoch != self.dataset.epoch:
            if self.autotuner is not None:
                self.autotuner.epoch_end(self)
            self.batches_delivered = 0
        self.dataset.set_epoch(epoch)

    @property
    def sampler(self) -> EpochSampler:
        """``loader.sampler.set_epoch(e)`` is ``loader.set_epoch(e)``: trainers that call it on
        every epoch, as they do for a DistributedSampler (Lightning's ``_set_sampler_epoch``),
        reshuffle this loader with no code of yours."""
        return EpochSampler(self)

    @property
    def epoch(self) -> int:
        return self.dataset.epoch

    @property
    def batch_size(self) -> int:
        """Samples per batch on this rank (the last batch of an epoch may hold fewer): what
        trainers read from a DataLoader, e.g. Accelerate for DeepSpeed's "auto" micro-batch."""
        return self.config.epoch.batch_size

    @property
    def config(self) -> LoaderConfig:
        return self.dataset.config

    @property
    def topology(self) -> Topology:
        return self.dataset.topology

    @property
    def recipe(self) -> Recipe:
        """What turns each image into the batch's pixels; ``str(loader.recipe)`` says in one
        line what the decoder fuses and what runs in the workers."""
        return self.dataset.recipe

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """This rank's batches of the current epoch (the rest of it after a resume): each one
        unwrapped from the worker's delivery, counted, pinned, yielded."""
        asked = time.perf_counter()  # the first next(): workers start, shards open
        meter = self.meter
        if meter is not None:  # what this process read before (the index) is not the pass's
            counters.forget(events=True)
            meter.new_epoch()
        if self._detected:
            check_topology(self.topology)
        self._started = True
        self.batches_delivered = 0
        self.replaced_from = {}
        self.replaced_why = {}
        self._recycle(-1, [])  # batches of the last pass dropped since
        expected = self.dataset.remaining_batches()
        budget = self._budget()
        self.dataset.ensure_pool()  # before iter() starts (or keeps) the workers
        it = self._live = iter(self.dataloader)
        ready = ready_probe(it, self.dataloader, self.config.workers)
        try:
            while True:
                waiting = ready() if meter is not None else (0.0, False)
                delivery = next(it, None)
                if delivery is None:
                    break
                batch = self._unwrap(delivery)
                self._count(delivery, budget)
                self.batches_delivered += 1
                if meter is not None:
                    n = len(batch["keys"])
                    meter.got(asked, n, *waiting, delivery.stats, delivery.replaced)
                    self._watch()
                    meter.yielded()
                yield batch
                asked = time.perf_counter()
        finally:
            self._live = None
            if meter is not None:
                meter.paused()
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
                _where(self.replaced_from, self.replaced_why),
            )
        if meter is not None:  # the last next(), which ends the pass
            meter.ended(time.perf_counter() - asked)

    def batch_nbytes(self) -> int:
        """Bytes of one batch's pool slot (0 where batches are allocated)."""
        return self.dataset.batch_nbytes()

    def decoding(self) -> int:
        """Decode threads let through at once (worker processes: all of them)."""
        if isinstance(self.dataloader, ThreadedBatches):
            return self.dataloader.gate.limit
        return self.topology.num_workers

    def apply(self, change: Change) -> None:
        """What the autotuner changes (``loaders.monitor.autotune``): with decode threads, how
        many decode at once and the depth of their queues, at once (the plan keeps its
        streams); with worker processes, the workers and prefetch of the next pass (planned
        for the new count; the persistent workers of the last one are shut down)."""
        num_workers, prefetch_factor = change.num_workers, change.prefetch_factor
        w = self.config.workers
        if isinstance(self.dataloader, ThreadedBatches):
            self.dataloader.gate.set_limit(num_workers)
            self.dataloader.set_prefetch(prefetch_factor)
            self.dataset.config = replace(
                self.config, workers=replace(w, prefetch_factor=prefetch_factor)
            )
            return
        if self._dataloader_kwargs is None or not w.num_workers or not num_workers:
            return
        _stop_workers(self._holder)  # the last pass's persistent workers
        self.dataset.reconfigure(num_workers, prefetch_factor)
        self._dataloader_kwargs.update(num_workers=num_workers, prefetch_factor=prefetch_factor)
        self.dataloader = DataLoader(self.dataset, **self._dataloader_kwargs)

    def _count(self, d: Delivery, budget: int | None) -> None:
        """Add a delivery's bookkeeping: replaced samples (against ``budget``, the epoch's
        ``max_replaced`` in samples), bytes."""
        self.num_replaced += d.replaced
        self.bytes_read += d.nbytes
        for url, n in d.replaced_from.items():
            self.replaced_from[url] = self.replaced_from.get(url, 0) + n
        for url, why in d.replaced_why.items():
            self.replaced_why.setdefault(url, why)
        if d.replaced and budget is not None and sum(self.replaced_from.values()) > budget:
            raise ShardError(
                f"rank {self.topology.rank}: {sum(self.replaced_from.values())} samples replaced "
                f"in epoch {self.epoch}, over max_replaced={self.config.batch.max_replaced} "
                f"({budget} samples; raise it, or None for no limit, to train on anyway): "
                f"{_where(self.replaced_from, self.replaced_why)}"
            )

    def _unwrap(self, d: Delivery) -> dict[str, Any]:
        """The batch of a delivery as the user gets it: pooled pixels resolved (a view of the
        pool slot, held until no reference to it is left; or, pinned, a copy and the slot
        freed), pooled labels copied, small tensors back from numpy (pinned where asked)."""
        batch, slot, pool = d.batch, d.slot, self.dataset.shared_pool
        pin = self.pin_memory or bool(getattr(self.dataloader, "pin_memory", False))
        key, listed = self.dataset.kind.pixel_key, self.dataset.kind.listed
        for name, value in batch.items():
            if isinstance(value, Packed):
                batch[name] = value.tensor().pin_memory() if pin else value.tensor()
            elif isinstance(value, Pooled):  # the labels (pixels are resolved below)
                batch[name] = value.resolve().clone() if name != key else value
        pixels = batch[key] if listed else [batch.get(key)]
        pooled = slot >= 0 and isinstance(pixels[0], Pooled)
        if pooled and not self.pin_memory:  # views of the slot: held until unreferenced
            pixels = [p.resolve() for p in pixels]
            batch[key] = pixels if listed else pixels[0]
            pool.hold(slot)  # type: ignore[union-attr]
            self._recycle(slot, pixels)
            return batch
        if pooled:  # decode threads with pin_memory: pinned copies
            pixels = [p.pin_memory() for p in pixels]
            batch[key] = pixels if listed else pixels[0]
        if slot >= 0:  # copied out, here or by the pin-memory thread: the slot is free
            pool.release(slot)  # type: ignore[union-attr]
            self.buffers_returned += 1
        self._recycle(-1, [])
        return batch

    def _budget(self) -> int | None:
        """How many samples this rank may replace this epoch (``max_replaced``), or None."""
        limit = self.config.batch.max_replaced
        if limit is None:
            return None
        if isinstance(limit, float):  # a share: at least one sample unless it is 0
            share = math.floor(limit * self.dataset.planned_samples())
            return max(share, 1) if limit > 0 else 0
        return limit

    def _recycle(self, slot: int, pixels: list[torch.Tensor | None]) -> None:
        """Give workers back the buffers of batches nobody references any more (a view keeps
        its base tensor alive, so dead weak references mean no view is left either)."""
        still = []
        for refs, s in self._outstanding:
            if all(ref() is None for ref in refs):
                self.dataset.shared_pool.release(s)  # type: ignore[union-attr]
                self.buffers_returned += 1
            else:
                still.append((refs, s))
        self._outstanding = still
        if slot >= 0:
            self._outstanding.append(([weakref.ref(p) for p in pixels if p is not None], slot))

    # --- resume --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable dict: epoch, batches delivered this epoch on this rank, the
        topology (and those of earlier segments of this epoch), seed, the data set's identity.
        Save it on every rank at the same step (as DDP training does); any rank's state
        resumes every rank (they describe the same history). O(1): nothing is planned or read.
        Callable before iterating and between batches."""
        return save_state(self.dataset, self.batches_delivered)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch ``state`` was saved in; call before iterating (or between passes).
        Raises ConfigError for a state of another data set, another version, or other shuffle
        settings."""
        if self.autotuner is not None and isinstance(state, dict) and state.get("segments"):
            # a malformed state: restore_state names what is wrong with it
            with contextlib.suppress(KeyError, TypeError, ValueError, IndexError):
                self.autotuner.adopt(self, int(state["segments"][-1]["num_workers"]))
        restore_state(self.dataset, state)
        self.batches_delivered = 0
        if self._started and self._dataloader_kwargs is not None:
            # persistent workers hold the old dataset copy: start fresh ones
            self.dataloader = DataLoader(self.dataset, **self._dataloader_kwargs)


class EpochSampler:
    """What ``StreamingLoader.sampler`` is: only ``set_epoch``, which reaches the loader."""

    def __init__(self, loader: StreamingLoader) -> None:
        self.loader = loader

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)


def _stop_workers(holder: list[Any]) -> None:
    """Stop the persistent worker processes of the DataLoader in ``holder`` (if any)."""
    stop = getattr(getattr(holder[0], "_iterator", None), "_shutdown_workers", None)
    if stop is not None:
        stop()


def _where(counts: dict[str, int], why: dict[str, str] | None = None, most: int = 5) -> str:
    """The shards with the most replaced samples: "URL (N: why)"."""
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    why = why or {}
    text = ", ".join(
        f"{url} ({n}: {why[url]})" if url in why else f"{url} ({n})" for url, n in top[:most]
    )
    return text + (f" and {len(top) - most} more shards" if len(top) > most else "")


__all__ = ["EpochSampler", "StreamingLoader"]
