"""A stream-bench run summarized: medians per pipeline and worker count, ratios pair by pair,
the ceiling's efficiency, the recommendation, the recipe that ran and the machine."""

from __future__ import annotations

import statistics
from dataclasses import fields
from typing import Any

from loaders.bench.bench_config import BenchConfig
from loaders.bench.measure import RunResult, recommend
from loaders.bench.report import PIPELINES
from wdstool.base.host import host_info
from wdstool.format.decode import PARTIAL_DECODE, whole_decoder


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


# the measured loader's settings the report's configuration shows, beside the benchmark's own
# (the transform is shown by name and as the recipe; storage options may hold credentials)
REPORTED = (
    "batch_size",
    "prefetch_factor",
    "output",
    "channels_last",
    "world_size",
    "rank",
    "shuffle_buffer",
    "cache_dir",
    "cache_limit",
    "label",
    "worker_mode",
    "epoch_size",
    "train",
    "scaled_decode",
)


def _config(cfg: BenchConfig, size: Any) -> dict[str, Any]:
    """The configuration as the report shows it: the benchmark's own fields, then the loader's
    settings at the values it ran with (given, or make_loader's defaults); ``size``: the image
    size the recipe delivers, an int where square."""
    out = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name != "loader"}
    out.update({name: cfg.setting(name) for name in REPORTED})
    if isinstance(size, tuple) and len(size) == 2 and size[0] == size[1]:
        size = size[0]
    out["image_size"] = size
    out["fields"] = tuple((cfg.setting("fields") or {}).items())  # (batch key, member spec)
    return out


def summarize(
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
            verdicts = [r.verdict for r in rs if r.verdict]
            if verdicts:  # the loader's own verdict on its last run
                row["verdict"] = verdicts[-1]
            if name == "wdstool" and w in ceilings and ceilings[w]["samples_per_s"]:
                row["efficiency"] = row["samples_per_s"] / ceilings[w]["samples_per_s"]
            summary.append(row)
    ratios = {}
    for other in PIPELINES[1:]:
        r = _ratios(runs, "wdstool", other)
        if r:
            ratios[f"wdstool/{other}"] = r
    from loaders.recipe import build_recipe

    size = cfg.setting("image_size")
    recipe = build_recipe(
        cfg.setting("transform"),
        train=cfg.setting("train"),
        image_size=size,
        output=cfg.setting("output"),
    )
    return {
        "recipe": str(recipe),
        "config": _config(cfg, recipe.size if size is None else size),
        "machine": machine_info(),
        "avg_sample_bytes": avg_bytes,
        "runs": [r.to_json(with_waits=True) for r in runs],
        "summary": summary,
        "ratios": ratios,
        "ceiling": {str(w): c for w, c in ceilings.items()},
        # train JPEGs: only the crop decoded (wdstool/format/_jpegcrop.c), or whole images
        "decoder": "partial" if PARTIAL_DECODE else "whole",
        "whole_decoder": whole_decoder(),  # torchvision, torchcodec or pil
        "scaled_decode": cfg.setting("scaled_decode") and PARTIAL_DECODE,
        "recommendation": recommend(runs) if len(set(cfg.workers)) > 1 else {},
        "interrupted": interrupted,
    }
