"""``wdstool stream-bench``: run the loader (and baselines, and the ceiling) and report.

Runs are interleaved (loader, baseline A, baseline B, loader, ...) for every worker count and
repeated, so machine noise hits every pipeline alike; ratios are taken pair by pair (same worker
count, same repeat) and reported as median and range.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loaders.bench.baselines import (
    ceiling,
    imagefolder_loader,
    webdataset_loader,
)
from loaders.bench.measure import RunResult, measure, recommend
from loaders.bench.report import PIPELINES
from loaders.bench.tokenize import Tokenize
from loaders.make import make_loader
from loaders.source import Source, resolve_source
from wdstool.base.errors import ConfigError, WdsToolError
from wdstool.base.host import host_info
from wdstool.format.decode import PARTIAL_DECODE, whole_decoder


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    source: str
    batch_size: int = 64
    workers: tuple[int, ...] = (2,)
    prefetch_factor: int = 4
    image_size: int = 224
    output: str = "uint8"
    channels_last: bool = False
    batches: int | None = None
    epochs: int = 1
    warmup: int = 0
    world_size: int = 1
    rank: int = 0
    step_ms: float = 0.0
    imagefolder: str | None = None
    webdataset: bool = False
    webdataset_fast: bool = False
    with_ceiling: bool = False
    repeats: int = 3
    shuffle_buffer: int = 2000
    storage_options: dict[str, Any] | None = None
    cache_dir: str | None = None
    cache_limit: int | None = None
    transform: Callable[[Any], Any] | None = field(default=None, compare=False)
    transform_name: str = "default"  # what the transform was named (a preset or module:attr)
    label: str | None = "cls"
    fields: tuple[tuple[str, str], ...] = ()  # (batch key, member spec)
    tokenize: str | None = None  # a field whose text the stand-in tokenizer turns into ids
    plain: bool = False  # also run the loader with image + label only ("wdstool-plain")
    sources: tuple[tuple[str, float], ...] = ()  # a mixture instead of ``source`` (url, weight)
    worker_mode: str = "process"
    threads: bool = False  # also run the loader with worker_mode="thread" ("wdstool-threads")
    epoch_size: int | None = None
    train: bool = True  # False: the eval transform (resize + centre crop)
    scaled_decode: bool = True  # make_loader(scaled_decode=...): large JPEG regions scaled
    exact: bool = False  # also run the loader with scaled_decode=False ("wdstool-exact")
    memory: bool = False  # sample the process tree's PSS (costs the pass a little throughput)

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.repeats < 1 or self.epochs < 1 or self.warmup < 0:
            raise ConfigError("batch size, repeats and epochs must be >= 1, warmup >= 0")
        if not self.workers or min(self.workers) < 0:
            raise ConfigError(f"workers={self.workers}: list worker counts >= 0")
        if self.batches is not None and self.batches < 1:
            raise ConfigError(f"batches={self.batches}: must be >= 1")
        if self.step_ms < 0:
            raise ConfigError(f"step_ms={self.step_ms}: must be >= 0")
        if self.transform is None and not self.train and (self.imagefolder or self.webdataset):
            raise ConfigError(
                "train=False: the imagefolder and webdataset baselines run the train "
                "augmentation; compare the eval path with exact=True, or give it as transform="
            )
        if self.webdataset_fast and (self.transform is not None or not self.train):
            raise ConfigError(
                "webdataset_fast=True runs the built-in train recipe; with transform= or "
                "train=False compare with webdataset=True"
            )
        if self.exact and not self.scaled_decode:
            raise ConfigError("exact=True with scaled_decode=False would compare a run with itself")
        if self.tokenize is not None and self.tokenize not in dict(self.fields):
            raise ConfigError(
                f"tokenize={self.tokenize!r}: request that field too, as text (field "
                f"{self.tokenize!r} with spec 'txt')"
            )


def machine_info() -> dict[str, Any]:
    import PIL
    import torch
    import torchvision
    import webdataset

    return {
        **host_info(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": PIL.__version__,
        "webdataset": getattr(webdataset, "__version__", "?"),
        "cuda": torch.cuda.is_available(),
    }


class _Epochs:
    """``epochs`` consecutive epochs of one fresh loader; ``current_iter`` is the DataLoader
    iterator in use (whose worker processes the benchmark watches)."""

    def __init__(self, make: Callable[[], Any], epochs: int) -> None:
        self.loader = make()
        self.epochs = epochs
        self.current_iter: Any = None

    def __iter__(self) -> Any:
        for e in range(self.epochs):
            if hasattr(self.loader, "set_epoch"):
                self.loader.set_epoch(e)
            src = iter(self.loader)
            dl = getattr(self.loader, "dataloader", self.loader)
            first = next(src, None)
            if first is None:
                return
            inner = getattr(dl, "_iterator", None)  # never bool() it: that calls len()
            self.current_iter = src if inner is None else inner
            yield first
            yield from src


def _epochs(make: Callable[[], Any], epochs: int) -> Callable[[], _Epochs]:
    return lambda: _Epochs(make, epochs)


def _dict_len(b: Any) -> int:
    return len(b["keys"])


def _tuple_len(b: Any) -> int:
    return len(b[1])


def run_stream_bench(
    cfg: BenchConfig,
    on_batch: Callable[[int], None] | None = None,
    on_run: Callable[[RunResult], None] | None = None,
) -> dict[str, Any]:
    """Every run of the benchmark, the pairwise ratios, ceiling, efficiency and a recommendation.
    Ctrl-C stops early and returns what was measured (``interrupted: true``)."""
    index = resolve_source(cfg.source, cfg.storage_options)
    runs: list[RunResult] = []
    ceilings: dict[int, dict[str, float]] = {}
    interrupted = False

    def run(name: str, make: Callable[[], Any], w: int, batch_len: Callable[[Any], int]) -> None:
        result = measure(
            name,
            _epochs(make, cfg.epochs),
            workers=w,
            batch_len=batch_len,
            batch_bytes=lambda b: 0,
            max_batches=cfg.batches,
            warmup=cfg.warmup,
            step_ms=cfg.step_ms,
            on_batch=on_batch,
            pss=cfg.memory,
        )
        runs.append(result)
        if on_run:
            on_run(result)
        if result.interrupted:
            raise KeyboardInterrupt

    try:
        for _repeat in range(cfg.repeats):
            for w in cfg.workers:

                def ours(
                    w: int = w,
                    plain: bool = False,
                    mode: str = cfg.worker_mode,
                    exact: bool = False,
                ) -> Any:
                    mixture = [Source(u, weight=wt) for u, wt in cfg.sources]
                    return make_loader(
                        cfg.source if plain or not mixture else mixture,
                        cfg.batch_size,
                        worker_mode=mode,
                        epoch_size=None if plain else cfg.epoch_size,
                        label="cls" if plain else cfg.label,
                        fields=None if plain else dict(cfg.fields),
                        fields_fn=None if plain or not cfg.tokenize else Tokenize(cfg.tokenize),
                        image_size=cfg.image_size if cfg.transform is None else None,
                        num_workers=w,
                        prefetch_factor=cfg.prefetch_factor,
                        output=cfg.output,
                        channels_last=cfg.channels_last,
                        train=cfg.train,
                        scaled_decode=cfg.scaled_decode and not exact,
                        rank=cfg.rank,
                        world_size=cfg.world_size,
                        shuffle_buffer=cfg.shuffle_buffer,
                        transform=cfg.transform,
                        storage_options=cfg.storage_options,
                        cache_dir=cfg.cache_dir,
                        cache_limit=cfg.cache_limit,
                        persistent_workers=True,
                    )

                run("wdstool", ours, w, _dict_len)
                if cfg.exact:
                    run("wdstool-exact", lambda w=w: ours(w, exact=True), w, _dict_len)
                if cfg.plain:
                    run("wdstool-plain", lambda w=w: ours(w, plain=True), w, _dict_len)
                if cfg.threads:
                    run("wdstool-threads", lambda w=w: ours(w, mode="thread"), w, _dict_len)
                if cfg.imagefolder:
                    root = cfg.imagefolder
                    run(
                        "imagefolder",
                        lambda w=w, root=root: imagefolder_loader(
                            root,
                            workers=w,
                            batch_size=cfg.batch_size,
                            image_size=cfg.image_size,
                            prefetch_factor=cfg.prefetch_factor,
                            recipe=cfg.transform,
                        ),
                        w,
                        _tuple_len,
                    )
                for name, enabled, same in (
                    ("webdataset-fast", cfg.webdataset_fast, True),
                    ("webdataset", cfg.webdataset, False),
                ):
                    if enabled:
                        run(
                            name,
                            lambda w=w, same=same: webdataset_loader(
                                list(index.urls),
                                workers=w,
                                batch_size=cfg.batch_size,
                                image_size=cfg.image_size,
                                prefetch_factor=cfg.prefetch_factor,
                                same_decoder=same,
                                scaled_decode=cfg.scaled_decode,
                                recipe=cfg.transform,
                            ),
                            w,
                            _tuple_len,
                        )
        if cfg.with_ceiling:
            for w in sorted(set(cfg.workers)):
                limit = None if cfg.batches is None else cfg.batches * cfg.batch_size
                kw = {
                    "processes": max(1, w),
                    "image_size": cfg.image_size if cfg.transform is None else None,
                    "output": cfg.output,
                    "max_samples": limit,
                    "storage_options": cfg.storage_options,
                    "channels_last": cfg.channels_last,
                    "train": cfg.train,
                    "scaled_decode": cfg.scaled_decode,
                    "transform": cfg.transform,
                }
                ceilings[w] = ceiling(index, **kw)
                if PARTIAL_DECODE:  # and what decoding whole images allows, as before
                    whole = ceiling(index, partial=False, **kw)
                    ceilings[w]["whole_image_samples_per_s"] = whole["samples_per_s"]
    except KeyboardInterrupt:
        interrupted = True
    avg_bytes = _avg_bytes(cfg)
    for r in runs:  # every pipeline reads the same samples: compressed MB/s from the manifest
        r.mb_per_s = r.samples_per_s * avg_bytes / 1e6
    return _report(cfg, runs, ceilings, interrupted, avg_bytes)


def _avg_bytes(cfg: BenchConfig) -> float:
    """Average compressed bytes per sample (from the manifest's shard sizes)."""
    from wdstool.format.manifest import load_manifest

    try:
        manifest, _ = load_manifest(cfg.source, cfg.storage_options)
        return manifest.total_bytes / max(1, manifest.num_samples)
    except WdsToolError:  # a brace pattern without a manifest: no byte counts
        return 0.0


def _ratios(runs: list[RunResult], a: str, b: str) -> dict[str, Any] | None:
    pairs: list[float] = []
    by_key: dict[tuple[str, int], list[RunResult]] = {}
    for r in runs:
        by_key.setdefault((r.name, r.workers), []).append(r)
    for (name, w), rs in by_key.items():
        if name != a:
            continue
        for x, y in zip(rs, by_key.get((b, w), []), strict=False):
            if y.samples_per_s > 0:
                pairs.append(x.samples_per_s / y.samples_per_s)
    if not pairs:
        return None
    return {
        "median": statistics.median(pairs),
        "min": min(pairs),
        "max": max(pairs),
        "pairs": len(pairs),
    }


def _report(
    cfg: BenchConfig,
    runs: list[RunResult],
    ceilings: dict[int, dict[str, float]],
    interrupted: bool,
    avg_bytes: float,
) -> dict[str, Any]:
    summary = []
    names = sorted({r.name for r in runs}, key=PIPELINES.index)
    for name in names:
        for w in cfg.workers:
            rs = [r for r in runs if r.name == name and r.workers == w]
            if not rs:
                continue
            row = {
                "pipeline": name,
                "workers": w,
                "runs": len(rs),
                "samples_per_s": statistics.median(r.samples_per_s for r in rs),
                "mb_per_s": statistics.median(r.mb_per_s for r in rs),
                "time_to_first_batch": statistics.median(r.time_to_first_batch for r in rs),
                "wait_p50_ms": statistics.median(r.wait_ms.get("p50", 0) for r in rs),
                "wait_p99_ms": statistics.median(r.wait_ms.get("p99", 0) for r in rs),
                "idle_pct": statistics.median(r.idle_pct for r in rs),
            }
            for what in (
                "worker_peak_rss_mb",
                "worker_private_mb",
                "peak_pss_mb",
                "peak_pss_anon_mb",
            ):
                seen = [getattr(r, what) for r in rs if getattr(r, what) is not None]
                if seen:  # memory figures exist only where they were measured
                    row[what] = statistics.median(seen)
            if name == "wdstool" and w in ceilings and ceilings[w]["samples_per_s"]:
                row["efficiency"] = row["samples_per_s"] / ceilings[w]["samples_per_s"]
            summary.append(row)
    ratios = {}
    for other in PIPELINES[1:]:
        r = _ratios(runs, "wdstool", other)
        if r:
            ratios[f"wdstool/{other}"] = r
    from loaders.recipe import build_recipe

    size = cfg.image_size if cfg.transform is None else None
    recipe = build_recipe(cfg.transform, train=cfg.train, image_size=size, output=cfg.output)
    return {
        "recipe": str(recipe),
        "config": {
            k: v for k, v in cfg.__dict__.items() if k not in ("transform", "storage_options")
        },
        "machine": machine_info(),
        "avg_sample_bytes": avg_bytes,
        "runs": [r.to_json(with_waits=True) for r in runs],
        "summary": summary,
        "ratios": ratios,
        "ceiling": {str(w): c for w, c in ceilings.items()},
        # train JPEGs: only the crop decoded (wdstool/format/_jpegcrop.c), or whole images
        "decoder": "partial" if PARTIAL_DECODE else "whole",
        "whole_decoder": whole_decoder(),  # torchvision, torchcodec or pil
        "scaled_decode": cfg.scaled_decode and PARTIAL_DECODE,
        "recommendation": recommend(runs) if len(set(cfg.workers)) > 1 else {},
        "interrupted": interrupted,
    }
