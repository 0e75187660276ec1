"""``make_loader``: the one entry point. Validates the arguments (one-line ConfigError before any
worker starts), builds the one :class:`loaders.config.LoaderConfig` everything downstream
reads, resolves the sources, and wires the dataset into a torch DataLoader (or decode threads)
behind a :class:`loaders.loader.StreamingLoader`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch

from loaders.clips import Clips
from loaders.config import BatchSettings, LoaderConfig, WorkerSettings
from loaders.dataset import ShardStreamDataset
from loaders.kinds import kind_arguments, kind_for
from loaders.loader import StreamingLoader
from loaders.mixing import SourceArg, loader_sources
from loaders.monitor.autotune import Autotuner
from loaders.monitor.budget import (
    auto_spec,
    default_num_workers,
    describe_auto,
    first_prefetch,
    first_workers,
)
from loaders.monitor.exporters import LogExporter
from loaders.plan import EpochSpec
from loaders.recipe.book import PerSize, Recipes, ViewsArg
from loaders.recipe.schedule import SizeArg
from loaders.schema import FieldsFn, Pad, as_pads
from loaders.source import ShardAccess
from loaders.split_reads import few_shards
from loaders.topology import detect_topology
from wdstool.base import counters
from wdstool.base.errors import ConfigError
from wdstool.base.retry import RetryPolicy

log = logging.getLogger("loaders.loader")

LOG_EVERY = 1000  # steps between the default log lines (loader.exporters.clear(): none)


def make_loader(
    source: SourceArg,
    batch_size: int = 64,
    *,
    # data and schema
    label: str | None = "cls",
    fields: Mapping[str, str] | None = None,
    fields_fn: FieldsFn | None = None,
    pad_fields: Mapping[str, Pad | int | float] | None = None,
    # epoch
    epoch_size: int | None = None,
    repeats: int = 1,
    shuffle: bool = True,
    shuffle_buffer: int = 2000,
    seed: int = 0,
    uneven: str = "pad",
    drop_last: bool = False,
    split: str = "samples",
    # recipe and output
    transform: Callable[[torch.Tensor], torch.Tensor] | PerSize | None = None,
    image_size: SizeArg | None = None,
    train: bool = True,
    views: ViewsArg | None = None,
    output: Any = "auto",
    channels_last: bool = False,
    scaled_decode: bool = True,
    clips: Clips | None = None,
    # workers
    num_workers: int | str | None = None,
    prefetch_factor: int | str = 4,
    worker_mode: str = "process",
    pin_memory: bool | None = None,
    persistent_workers: bool = True,
    multiprocessing_context: str | None = None,
    memory_budget: int | float | str | None = None,
    # storage
    storage_options: dict[str, Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | str | None = None,
    retry: RetryPolicy | None = None,
    # errors
    on_error: str = "raise",
    max_replaced: int | float | None = 0.1,
    # topology
    rank: int | None = None,
    world_size: int | None = None,
    # watching
    stats: bool = True,
) -> StreamingLoader:
    """A streaming loader over WebDataset shards for one rank of a (torchrun) job: iterate it
    for batches (dicts: ``pixel_values`` uint8 [B,3,S,S], ``labels`` int64 [B], ``keys``, one
    entry per field); every rank yields exactly ``len(loader)`` batches; call
    ``loader.set_epoch(e)`` before each epoch. docs/reference/loaders.md has a table of every
    parameter; the guides explain each where it matters.

    Data and schema:
        source: an index.json path/URL, a folder or prefix holding one, a folder or prefix of
            ``.tar`` shards without one, a brace pattern of shard URLs
            (``data/train-{000000..000099}.tar``; counts then come from a header-only scan),
            Parquet files read in place (a ``.parquet`` file, folder, glob or brace pattern,
            ``hf://datasets/ORG/NAME``; ``#SPLIT`` keeps a split; row groups as the plan's
            units, docs/guides/parquet.md), or a list of :class:`loaders.Source` (a weighted
            mixture, docs/guides/mixtures.md).
        batch_size: samples per batch on this rank.
        label: ``"cls"`` (the ``.cls`` member, an int), ``"json:a.b"`` (an int at that key
            path of the ``.json``) or ``None`` (batches have no ``labels``).
        fields: batch keys -> member specs, delivered as lists aligned with the pixels:
            ``"txt"`` -> str, ``"json"`` -> the parsed object, ``"json:PATH"``, any other
            extension -> bytes (never unpickled); ``None`` where a sample lacks the member.
            Members no spec names are never read.
        fields_fn: picklable, run in the workers: each sample's dict of fields -> the dict
            the batch carries (tensors stacked: tokenized captions). A bad ``.json``, a label
            that is not an int or an exception here is a bad sample (``on_error``).
        pad_fields: fields whose length differs between samples, batched by padding
            (``{"tokens": 0}`` or :class:`loaders.Pad`), with ``NAME_lengths``, ``NAME_mask``.

    Epoch:
        epoch_size: samples per epoch over all sources (None: their sum).
        repeats: each epoch's samples are ceil(N/k) distinct ones k times over, each copy with
            its own draws, the copies on k different ranks when ``world_size >= k``.
        shuffle, shuffle_buffer, seed: the order (shards, rotation, block shuffle of at most
            ``shuffle_buffer`` samples per worker) drawn per (seed, epoch); ``seed`` also
            seeds every sample's augmentation, per (seed, epoch, key, occurrence).
        uneven: samples that do not divide over the ranks: ``"pad"``, ``"drop"``, or
            ``"mask"`` (exact evaluation: ``batch["valid"]``).
        drop_last: drop the final partial batch, on every rank alike.
        split: where ranks' shares are cut: ``"samples"`` (anywhere: a shard may be read by
            two ranks) or ``"shards"`` (whole shards per rank, every rank padded to the same
            count by ``uneven``: for shards on a store without sample offsets, such as
            someone else's counted from side files; docs/guides/foreign-at-scale.md).

    Recipe and output:
        transform: the recipe: a torchvision v2 or v1 pipeline, timm's or albumentations',
            any callable of a uint8 [3,H,W] tensor, or ``per_size(factory)``. Its leading
            crop/resize/flip run is fused into the decoder (only the region of a JPEG is
            decoded), the rest runs in the workers on the crop; ``loader.recipe`` says what
            was fused. None: the built-in train recipe (RandomResizedCrop + flip) or, with
            ``train=False``, the eval one (Resize(S/0.875) + CenterCrop).
        image_size: an int or (h, w) (default 224, or the transform's own: one that
            disagrees is a ConfigError), or a schedule ``{epoch: size}`` / ``epoch -> size``
            (``loaders.linear_ramp``), fixed at ``set_epoch``.
        train: with ``transform=None``, the train or the eval recipe.
        views: ``[(transform, count), ...]``: batches carry ``views``, a list of uint8
            [B,3,h,w] tensors (multi-crop), instead of ``pixel_values``.
        output: ``"auto"`` (float32 where the recipe normalizes, else uint8), ``"uint8"``,
            ``"float"`` (normalized in the workers) or ``"encoded"`` (the workers parse
            headers and draw the geometry; batches carry ``encoded``, ``offsets`` and
            ``geometry`` for :class:`loaders.DeviceDecoder`, which decodes on the GPU); or
            the settings object of a kind of output (``loaders.kinds``): ``Clips(...)``.
        channels_last: ``pixel_values`` laid out [B,S,S,3] in memory, same shape and values,
            written so by the workers' resize.
        scaled_decode: a JPEG region more than twice the output on both sides is decoded at
            1/2, 1/4 or 1/8 scale (several times less work; slightly different pixels there);
            False keeps the exact pixels of a full-scale decode.
        clips: :class:`loaders.Clips`: each video sample becomes a clip, batches carry
            ``video`` uint8 [B,T,3,H,W] (or [B,3,T,H,W]), ``clip_span``, ``clip_index``; only
            the clip's frames are decoded; image samples become still clips
            (docs/guides/video.md). The same as ``output=Clips(...)``.

    Workers:
        num_workers: decode workers per rank (None: the rank's cores, at most 8; 0: in this
            process; ``"auto"``: tuned from what the loader measures, keeping its process
            tree under ``memory_budget``; ``loaders.monitor.autotune``).
        prefetch_factor: batches each worker prepares ahead (``"auto"``: from 2, deepened
            where steps wait).
        worker_mode: ``"process"`` (DataLoader worker processes) or ``"thread"`` (decode
            threads in this process: the same batches, one heap and one torch).
        pin_memory: None: where CUDA is available.
        persistent_workers, multiprocessing_context: as torch's DataLoader takes them.
        memory_budget: with "auto": bytes, "12GB", or a share of the host (default 0.8 of it
            over the node's ranks).

    Storage:
        storage_options: s3fs/fsspec options (``endpoint_url``, ``key``/``secret``/``token``,
            ``profile``, ``anon``, ...); the usual AWS variables apply.
        cache_dir, cache_limit: a local copy of every shard read, shared by the host's workers
            and ranks (``cache_limit``: bytes or "50GB", least recently used evicted).
        retry: a :class:`wdstool.base.retry.RetryPolicy` for dropped connections, timeouts,
            5xx and throttling (a shard's GET resumes at the byte already read).

    Errors:
        on_error: ``"raise"`` or ``"skip"`` (a bad sample is replaced; counts stay exact).
        max_replaced: the samples ``"skip"`` may replace per epoch (a count, or a share of the
            rank's epoch; None: no limit); docs/guides/reliability.md.

    Topology:
        rank, world_size: this rank of the job (None: detected from torch.distributed or the
            environment).

    Watching:
        stats: the stage clocks behind ``loader.stats()``, ``loader.diagnose()`` (logged at
            INFO on rank 0 every 1000 steps and at epoch ends) and ``loader.watch(exporter)``
            (docs/guides/monitoring.md); False: none.
    """
    sample, output, repeats = kind_arguments(
        output, clips, views=views, channels_last=channels_last, repeats=repeats
    )
    auto = auto_spec(num_workers, prefetch_factor, memory_budget, stats, worker_mode)
    workers = WorkerSettings(
        num_workers=first_workers(auto, num_workers, worker_mode),
        mode=worker_mode,  # type: ignore[arg-type]
        prefetch_factor=first_prefetch(prefetch_factor),
        pin_memory=pin_memory,
        persistent=persistent_workers,
        context=multiprocessing_context,
    )
    epoch = EpochSpec(
        seed=seed,
        batch_size=batch_size,
        shuffle=shuffle,
        shuffle_buffer=shuffle_buffer,
        uneven=uneven,
        drop_last=drop_last,
        split=split,  # type: ignore[arg-type]
    )
    batch = BatchSettings(
        output=output,  # type: ignore[arg-type]
        channels_last=channels_last,
        scaled_decode=scaled_decode,
        on_error=on_error,  # type: ignore[arg-type]
        max_replaced=max_replaced,
    )
    recipes = Recipes(transform, train=train, image_size=image_size, output=output, views=views)
    access = ShardAccess(
        storage_options=storage_options, cache_dir=cache_dir, cache_limit=cache_limit, retry=retry
    )
    topology = replace(detect_topology(rank, world_size), num_workers=workers.num_workers)
    counters.forget(events=True)  # from here: what making this loader fetches (stats().setup)
    sources, with_source = loader_sources(
        source,
        label=label,
        fields=fields,
        fields_fn=fields_fn,
        access=access,
        skip_damaged=batch.on_error == "skip",
        one_image=sample is None,  # clips and interleaved samples read members Parquet has not
    )
    fetched = counters.take()
    config = LoaderConfig(
        epoch=epoch,
        epoch_size=epoch_size,
        repeats=repeats,
        recipes=recipes,
        batch=replace(batch, output=recipes.output),  # "auto" settled by the recipe
        sample=sample,
        pads=tuple(as_pads(pad_fields).items()),
        with_source=with_source,
        workers=workers,
        max_workers=auto.max_workers if auto is not None and auto.workers else 0,
        stats=stats,
    )
    sources, config = kind_for(config).settle(sources, config)
    return _start(ShardStreamDataset(sources, config, topology), source, rank, fetched, auto)


def _start(
    dataset: ShardStreamDataset, source: Any, rank: int | None, fetched: Any, auto: Any
) -> StreamingLoader:
    """The loader over ``dataset``: checked to hold a batch, logged, watched (the verdict in
    the log, INFO on rank 0, every :data:`LOG_EVERY` steps and at epoch ends), tuned where a
    setting is "auto" (``auto``: the autotuner's settings); ``fetched``: what making it read."""
    config, topology = dataset.config, dataset.topology
    if len(dataset) == 0:
        raise ConfigError(
            f"{source}: {dataset.mixture.total} samples over {topology.world_size} ranks give no "
            f"batch of {config.epoch.batch_size} with drop_last=True; lower batch_size or set "
            "drop_last=False"
        )
    log.info("loader: %s", dataset.describe())
    if topology.rank == 0:
        readers = topology.world_size * topology.streams
        for s in dataset.sources:
            if (few := few_shards(s.url, s.index, readers)) is not None:
                log.warning(few)
    loader = StreamingLoader.start(dataset, detected=rank is None)
    if loader.meter is not None:
        loader.meter.made(fetched)
    if config.stats:
        loader.watch(LogExporter(every=LOG_EVERY))
    if auto is not None:
        loader.autotuner = Autotuner(auto)
        loader.autotuner.start(loader)
        w = config.workers
        what = describe_auto(auto, w.num_workers, w.mode.value, w.prefetch_factor)
        log.info("loader autotune: %s", what)
    return loader


__all__ = ["default_num_workers", "make_loader"]
