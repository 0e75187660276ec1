"""``make_loader``: the one entry point. Validates the arguments (one-line ConfigError before any
worker starts), resolves the sources, and wires the dataset into a torch DataLoader (or decode
threads) behind a :class:`loaders.loader.StreamingLoader`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch

from loaders.clips import ClipRecipe, Clips
from loaders.config import BatchSettings, LoaderConfig, WorkerSettings
from loaders.dataset import ShardStreamDataset
from loaders.loader import StreamingLoader
from loaders.mixing import SourceArg, loader_sources
from loaders.monitor.autotune import WORKER_ESTIMATE, AutoSpec, Autotuner
from loaders.monitor.exporters import LogExporter
from loaders.monitor.memory import host_total, owned_memory
from loaders.plan import EpochSpec
from loaders.recipe.book import PerSize, Recipes, ViewsArg
from loaders.recipe.schedule import SizeArg
from loaders.schema import FieldsFn, Pad, as_pads
from loaders.source import ShardAccess
from loaders.topology import cores_per_rank, detect_topology, local_world_size
from wdstool.base import counters
from wdstool.base.errors import ConfigError
from wdstool.base.params import parse_size
from wdstool.base.retry import DEFAULT_RETRY, RetryPolicy

log = logging.getLogger("loaders.loader")


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
    image_size: SizeArg | None = None,
    train: bool = True,
    shuffle: bool = True,
    shuffle_buffer: int = 2000,
    seed: int = 0,
    num_workers: int | str | None = None,
    prefetch_factor: int | str = 4,
    pin_memory: bool | None = None,
    persistent_workers: bool = True,
    rank: int | None = None,
    world_size: int | None = None,
    uneven: str = "pad",
    drop_last: bool = False,
    output: str = "auto",
    channels_last: bool = False,
    scaled_decode: bool = True,
    transform: Callable[[torch.Tensor], torch.Tensor] | PerSize | None = None,
    views: ViewsArg | None = None,
    repeats: int = 1,
    on_error: str = "raise",
    max_replaced: int | float | None = 0.1,
    worker_mode: str = "process",
    storage_options: dict[str, Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | str | None = None,
    retry: RetryPolicy | None = None,
    multiprocessing_context: str | None = None,
    stats: bool = True,
    memory_budget: int | float | str | None = None,
    clips: Clips | None = None,
    pad_fields: Mapping[str, Pad | int | float] | None = None,
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
    workers only parse headers and draw the recipe's geometry; batches carry ``encoded`` (uint8
    bytes), ``offsets`` and ``geometry`` for :class:`loaders.DeviceDecoder`, which decodes and
    augments on the GPU (nvJPEG). ``channels_last=True``: ``pixel_values`` keeps its shape and
    values but is laid out [B,S,S,3] in memory (``torch.channels_last`` strides), what a
    channels-last model consumes after ``.to(device, non_blocking=True)`` with no conversion;
    the workers' resize writes that layout directly (~40% less resize time here).
    ``transform``: the recipe, a torchvision v2 pipeline (or any callable of a uint8 [3,H,W]
    tensor). Its leading crop/resize/flip run is fused into the decoder (only the region of a
    JPEG is decoded; bit-exact with torchvision on the whole image when ``scaled_decode=False``),
    the rest runs in the workers on the crop; every random op is seeded per (seed, epoch, key,
    occurrence). ``loader.recipe`` says what was fused. ``None``: the built-in train recipe
    (RandomResizedCrop + flip) or, with ``train=False``, the eval one (Resize(S/0.875) +
    CenterCrop), at ``image_size`` (an int or (h, w); default 224). With a ``transform`` the
    output size is the pipeline's (an ``image_size`` that disagrees is a ConfigError).
    ``image_size`` may also be a schedule: ``{epoch: size}`` or a callable ``epoch -> size``
    (``loaders.linear_ramp``), fixed at ``set_epoch``; ``transform=per_size(factory)`` for
    pipelines that depend on the size. ``repeats=k``: each epoch's samples are ceil(N/k)
    distinct ones k times over, each copy with its own draws, the copies on k different ranks
    when ``world_size >= k``. ``views=[(transform, count), ...]``: batches carry ``views``, a
    list of uint8 [B,3,h,w] tensors (multi-crop), instead of ``pixel_values``.
    ``scaled_decode=True`` (default): a JPEG region more than twice the output on both sides
    is decoded at 1/2, 1/4 or 1/8 scale in the DCT domain (the largest reduction that keeps it
    at least the output size), then resized as usual: several times less work on large
    images, slightly different pixels there; ``False`` keeps the exact pixels of a full-scale
    decode. Every rank yields exactly
    ``len(loader)`` batches. Call ``loader.set_epoch(e)`` before each epoch.

    ``worker_mode="thread"``: the ``num_workers`` streams run as decode threads inside this
    process instead of DataLoader worker processes (the decode, crop and resize release the GIL):
    the same batches, keys and pixels, one Python heap and one copy of torch instead of one per
    worker. ``epoch_size``, a list of :class:`loaders.Source` (a weighted mixture),
    ``uneven="mask"`` (exact evaluation: ``batch["valid"]``) and ``max_replaced`` (the budget
    of samples ``on_error="skip"`` may replace per epoch) are described in the guides
    (docs/guides/mixtures.md, reliability.md).

    Remote sources (``s3://bucket/prefix``, any fsspec URL): ``storage_options`` as for s3fs
    (``endpoint_url``, ``key``/``secret``/``token``, ``profile``, ``anon``, ``client_kwargs``,
    ``config_kwargs``); the usual AWS variables apply. Each shard is one streaming GET, resumed
    at the byte offset already read after a dropped connection, timeout, 5xx or throttling
    (``retry``: a :class:`wdstool.base.retry.RetryPolicy`). ``cache_dir`` keeps a local copy of
    every shard read (``cache_limit``: bytes or "50GB", least recently used evicted), shared
    safely by all workers and ranks on the host.

    Watching it train: ``loader.stats()`` (the epoch so far and the last steps: samples/s, the
    time the loop waited in ``next()``, worker time per stage, prefetch occupancy, bytes,
    requests, retries, cache hits, memory), ``loader.diagnose()`` (one line: input-bound or
    not, the stage that dominates, what to do; logged at INFO on rank 0 every 1000 steps and
    at the end of each epoch), ``loader.watch(exporter, ...)`` (logging, TensorBoard,
    Prometheus, a callback: ``loaders.monitor.exporters``); docs/guides/monitoring.md.
    ``stats=False`` switches the stage clocks off.

    ``num_workers="auto"`` / ``prefetch_factor="auto"``: the loader tunes them from what it
    measures (``loaders.monitor.autotune``), keeping its process tree's own memory under
    ``memory_budget`` (bytes, "12GB", or a share of the host's memory; default 0.8 of it
    over the node's ranks): decode threads grow and shrink while training, worker processes
    are revised between epochs. Epochs cover the same samples with the same pixels whatever
    it picks; its choices are in ``loader.stats().autotune`` and the log.

    Videos: ``clips=Clips(frames=16, stride=2, ...)`` (:class:`loaders.Clips`) turns each
    video sample into a clip: batches carry ``video`` uint8 [B,T,3,H,W] (or [B,3,T,H,W]),
    ``clip_span`` (seconds), ``clip_index`` and the usual ``labels``/``keys``; only the clip's
    frames are decoded, and the spatial recipe (``transform``/``image_size``, a torchvision
    v2 pipeline) draws once per clip; image samples of a mixture become still clips
    (docs/guides/video.md). ``pad_fields={"tokens": 0}`` (or :class:`loaders.Pad`) batches
    fields whose length differs between samples by padding, with ``NAME_lengths`` and
    ``NAME_mask``.
    """
    if clips is not None:
        if not isinstance(clips, Clips):
            raise ConfigError(f"clips={clips!r}: give a loaders.Clips(frames=..., ...)")
        _check_clips(clips, views, output, channels_last)
        output = "uint8"
        if clips.clips_per_video > 1:
            if repeats not in (1, clips.clips_per_video):
                raise ConfigError(
                    f"repeats={repeats} and Clips(clips_per_video={clips.clips_per_video}): "
                    "a clips loader repeats each video once per clip; give one of them"
                )
            repeats = clips.clips_per_video
    pads = as_pads(pad_fields)
    auto = _auto_spec(num_workers, prefetch_factor, memory_budget, stats, worker_mode)
    workers = WorkerSettings(
        num_workers=(
            default_num_workers()
            if num_workers is None
            else _first_workers(auto, num_workers, worker_mode)
        ),
        mode=worker_mode,
        prefetch_factor=AUTO_PREFETCH if prefetch_factor == "auto" else prefetch_factor,  # type: ignore[arg-type]
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
    )
    batch = BatchSettings(
        output=output,
        channels_last=channels_last,
        scaled_decode=scaled_decode,
        on_error=on_error,
        max_replaced=max_replaced,
    )
    recipes = Recipes(transform, train=train, image_size=image_size, output=output, views=views)
    batch = replace(batch, output=recipes.output)  # "auto" settled by the recipe
    access = ShardAccess(
        storage_options=storage_options,
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        cache_limit=cache_limit,
        retry=retry or DEFAULT_RETRY,
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
    )
    fetched = counters.take()
    if clips is not None:
        sources = [replace(s, schema=replace(s.schema, videos=True)) for s in sources]
        if clips.clips_per_video > 1 and epoch_size is None:  # every video, once per clip
            epoch_size = clips.clips_per_video * sum(sum(s.index.sizes) for s in sources)
        ClipRecipe(clips, recipes.at(0)[0], train)  # its rules, checked before any worker
    dataset = ShardStreamDataset(
        sources,
        LoaderConfig(epoch=epoch, workers=workers, batch=batch, stats=stats),
        topology,
        recipes=recipes,
        epoch_size=epoch_size,
        repeats=repeats,
        with_source=with_source,
        max_workers=auto.max_workers if auto is not None and auto.workers else 0,
        clips=clips,
        pads=pads,
    )
    if len(dataset) == 0:
        raise ConfigError(
            f"{source}: {dataset.mixture.total} samples over {topology.world_size} ranks give no "
            f"batch of {batch_size} with drop_last=True; lower batch_size or set drop_last=False"
        )
    log.info("loader: %s", dataset.describe())
    loader = StreamingLoader.start(dataset, detected=rank is None)
    if loader.meter is not None:
        loader.meter.made(fetched)
    if stats:  # the verdict in the log (INFO, rank 0) every LOG_EVERY steps and at epoch ends
        loader.watch(LogExporter(every=LOG_EVERY))
    if auto is not None:
        loader.autotuner = Autotuner(auto)
        loader.autotuner.start(loader)
        log.info("loader autotune: %s", _describe_auto(auto, workers))
    return loader


def _check_clips(clips: Clips, views: Any, output: str, channels_last: bool) -> None:
    """What a clips loader cannot do (one-line ConfigErrors)."""
    if views is not None:
        raise ConfigError("clips and views: multi-crop views of clips are not supported")
    if output not in ("auto", "uint8"):
        raise ConfigError(
            f"clips with output={output!r}: clips are uint8 ([B,T,3,H,W] is large in float); "
            "normalize on the device (loaders.normalize)"
        )
    if channels_last:
        raise ConfigError("clips and channels_last: clips are laid out by Clips(layout=...)")


LOG_EVERY = 1000  # steps between the default log lines (loader.exporters.clear(): none)
AUTO_PREFETCH = 2  # prefetch_factor="auto" starts here and deepens where steps wait
BUDGET_SHARE = 0.8  # the guides' "memory < 80%", over the node's ranks


def _auto_spec(
    num_workers: Any, prefetch_factor: Any, budget: Any, stats: bool, mode: str
) -> AutoSpec | None:
    """The autotuner's settings, or None where nothing is "auto" (a ConfigError for another
    word, for "auto" without stats, for a budget that is not a size, or for one below what
    this process already holds)."""
    for name, value in (("num_workers", num_workers), ("prefetch_factor", prefetch_factor)):
        if isinstance(value, str) and value != "auto":
            raise ConfigError(f'{name}={value!r}: give an int or "auto"')
    workers, prefetch = num_workers == "auto", prefetch_factor == "auto"
    if not (workers or prefetch):
        if budget is not None:
            raise ConfigError(
                'memory_budget applies to num_workers="auto" / prefetch_factor="auto"'
            )
        return None
    if not stats:
        raise ConfigError('"auto" settings need the loader\'s stats: drop stats=False')
    total = host_total()
    if budget is None:
        limit = int(BUDGET_SHARE * total / max(1, local_world_size()))
    elif isinstance(budget, float) and not isinstance(budget, bool):
        if not 0 < budget <= 1:
            raise ConfigError(f"memory_budget={budget!r}: a share of the host is in (0, 1]")
        limit = int(budget * total)
    else:
        try:
            limit = parse_size(budget)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"memory_budget: {exc}") from None
        if limit <= 0:
            raise ConfigError(f"memory_budget must be positive, got {budget!r}")
    main = owned_memory()
    if limit < main:
        raise ConfigError(
            f"memory_budget={limit / 1e6:.0f} MB is below what this process already holds "
            f"({main / 1e6:.0f} MB); give the loader more"
        )
    cap = 0
    if workers:  # decode threads: up to 2 per core (a thread waits on the GIL part of its time)
        cap = default_num_workers() if str(mode) == "process" else min(8, 2 * cores_per_rank())
    return AutoSpec(workers=workers, prefetch=prefetch, max_workers=cap, budget=limit)


def _first_workers(auto: AutoSpec | None, num_workers: Any, mode: str) -> int:
    """The workers to start with. Decode threads: the plan's streams, up to 2 a core (how
    many decode at once is gated from the first batch: ``Autotuner.start``). Worker
    processes: as many as the budget holds at :data:`WORKER_ESTIMATE` each beside this
    process, at least one."""
    if auto is None or not auto.workers:
        return int(num_workers)
    if str(mode) == "thread":
        return auto.max_workers
    return max(1, min(auto.max_workers, (auto.budget - owned_memory()) // WORKER_ESTIMATE))


def _describe_auto(auto: AutoSpec, w: WorkerSettings) -> str:
    what = " and ".join(
        n for n, on in (("workers", auto.workers), ("prefetch", auto.prefetch)) if on
    )
    return (
        f"{what} tuned from {w.num_workers} {w.mode.value} workers, prefetch "
        f"{w.prefetch_factor}, at most {auto.max_workers or w.num_workers} workers, memory budget "
        f"{auto.budget / 1e9:.1f} GB"
    )


__all__ = ["default_num_workers", "make_loader"]
