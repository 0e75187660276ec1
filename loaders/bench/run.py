"""``wdstool stream-bench``: run the loader (and baselines, and the ceiling) and report.

Runs are interleaved (loader, baseline A, baseline B, loader, ...) for every worker count and
repeated, so machine noise hits every pipeline alike; ratios are taken pair by pair (same worker
count, same repeat) and reported as median and range.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loaders.bench.baselines import (
    ceiling,
    imagefolder_loader,
    webdataset_loader,
)
from loaders.bench.bench_config import BenchConfig
from loaders.bench.measure import RunResult, measure
from loaders.bench.summary import summarize
from loaders.bench.tokenize import Tokenize
from loaders.make import make_loader
from loaders.mixing import resolve_any
from loaders.parquet_source import ParquetIndex
from loaders.recipe import DEFAULT_SIZE
from loaders.source import DatasetIndex, Source
from wdstool.base.errors import ConfigError, WdsToolError
from wdstool.format.decode import PARTIAL_DECODE


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
    index = resolve_any(cfg.source, cfg.setting("storage_options"))
    if isinstance(index, ParquetIndex) and (cfg.webdataset or cfg.webdataset_fast):
        raise ConfigError(
            f"{cfg.source}: Parquet files; the webdataset baselines read tar shards (compare "
            "with imagefolder=PATH, plain, threads or exact)"
        )
    runs: list[RunResult] = []
    ceilings: dict[int, dict[str, float]] = {}
    interrupted = False
    # what the baselines share with the measured loader: batch, image size, prefetch, recipe
    batch_size, prefetch = cfg.setting("batch_size"), cfg.setting("prefetch_factor")
    size, transform = cfg.setting("image_size") or DEFAULT_SIZE, cfg.setting("transform")

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
                    mode: str | None = None,
                    exact: bool = False,
                ) -> Any:
                    mixture = [Source(u, weight=wt) for u, wt in cfg.sources]
                    run_only: dict[str, Any] = {"num_workers": w}  # this run's, over cfg.loader
                    if plain:  # image + .cls only
                        run_only.update(epoch_size=None, label="cls", fields=None, fields_fn=None)
                    elif cfg.tokenize:
                        run_only["fields_fn"] = Tokenize(cfg.tokenize)
                    if mode is not None:
                        run_only["worker_mode"] = mode
                    if exact:
                        run_only["scaled_decode"] = False
                    return make_loader(
                        cfg.source if plain or not mixture else mixture,
                        **{**cfg.loader, **run_only},
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
                            batch_size=batch_size,
                            image_size=size,
                            prefetch_factor=prefetch,
                            recipe=transform,
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
                                batch_size=batch_size,
                                image_size=size,
                                prefetch_factor=prefetch,
                                same_decoder=same,
                                scaled_decode=cfg.setting("scaled_decode"),
                                recipe=transform,
                            ),
                            w,
                            _tuple_len,
                        )
        if cfg.with_ceiling:
            for w in sorted(set(cfg.workers)):
                limit = None if cfg.batches is None else cfg.batches * batch_size
                kw = {
                    "processes": max(1, w),
                    "image_size": cfg.setting("image_size"),
                    "output": cfg.setting("output"),
                    "max_samples": limit,
                    "storage_options": cfg.setting("storage_options"),
                    "channels_last": cfg.setting("channels_last"),
                    "train": cfg.setting("train"),
                    "scaled_decode": cfg.setting("scaled_decode"),
                    "transform": transform,
                }
                ceilings[w] = ceiling(index, **kw)
                if PARTIAL_DECODE:  # and what decoding whole images allows, as before
                    whole = ceiling(index, partial=False, **kw)
                    ceilings[w]["whole_image_samples_per_s"] = whole["samples_per_s"]
    except KeyboardInterrupt:
        interrupted = True
    avg_bytes = _avg_bytes(cfg, index)
    for r in runs:  # every pipeline reads the same samples: compressed MB/s from the manifest
        r.mb_per_s = r.samples_per_s * avg_bytes / 1e6
    return summarize(cfg, runs, ceilings, interrupted, avg_bytes)


def _avg_bytes(cfg: BenchConfig, index: DatasetIndex) -> float:
    """Average compressed bytes per sample (from the manifest's shard sizes; Parquet files:
    theirs over their rows, from the footers)."""
    from wdstool.format.manifest import load_manifest

    if isinstance(index, ParquetIndex):
        return sum(ft.size for ft in index.footers) / max(1, index.num_samples)
    try:
        manifest, _ = load_manifest(cfg.source, cfg.setting("storage_options"))
        return manifest.total_bytes / max(1, manifest.num_samples)
    except WdsToolError:  # a brace pattern without a manifest: no byte counts
        return 0.0
