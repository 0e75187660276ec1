"""The report's charts, drawn with matplotlib as SVG files from :mod:`wdstool.show.stats`.

No pyplot (no global figure state, no GUI backend): each chart is its own ``Figure``. Text
from the data set (class names, member sets, skip reasons) is drawn as text, never parsed as
mathtext; the SVG carries no date and fixed ids, so the same numbers give the same file.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from typing import Any

from wdstool.base.errors import ConfigError
from wdstool.format.tar_safety import printable_name
from wdstool.show.report_folder import NEEDS

BAR_LIMIT = 30  # bars drawn at most in a chart of names (the table lists the rest)
SHARD_BARS = 60  # up to this many shards get a bar each, more a histogram
COLOR = "#3b6ea5"


def _figure(height: float = 3.0):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(NEEDS) from None

    return Figure(figsize=(6.4, height), layout="constrained")


def _svg(fig) -> bytes:
    import matplotlib

    out = io.BytesIO()
    rc = {"svg.hashsalt": "wdstool-show", "svg.fonttype": "path"}
    with matplotlib.rc_context(rc), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # glyphs a font lacks: drawn as boxes
        fig.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def _plain(labels) -> None:
    for text in labels:
        text.set_parse_math(False)


def _bars(ax, names: Sequence[str], counts: Sequence[int], xlabel: str) -> None:
    pos = list(range(len(names)))
    ax.barh(pos, counts, color=COLOR)
    names = [printable_name(n) for n in names]  # control characters, lone surrogates escaped
    ax.set_yticks(pos, labels=[n if len(n) <= 40 else n[:39] + "…" for n in names])
    _plain(ax.get_yticklabels())
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.tick_params(axis="y", labelsize=8)


def shards_chart(stats: dict[str, Any]) -> bytes:
    """Samples and megabytes per shard (bars by shard, or histograms for many shards)."""
    each = stats["shards"]["each"]
    parquet = stats["dataset"].get("format") == "parquet"
    unit, order = ("file", "by URL") if parquet else ("shard", "manifest order")
    with_samples = stats["shards"]["samples"] is not None
    fig = _figure(3.4 if with_samples else 2.4)
    axes = fig.subplots(2 if with_samples else 1, 1, squeeze=False)[:, 0]
    series = [("megabytes", [s["bytes"] / 1e6 for s in each])]
    if with_samples:
        series.insert(0, ("rows" if parquet else "samples", [s["samples"] for s in each]))
    for ax, (what, values) in zip(axes, series, strict=True):
        if len(each) <= SHARD_BARS:
            ax.bar(range(len(values)), values, color=COLOR)
            ax.set_xlabel(f"{unit} ({order})")
            ax.set_ylabel(what)
        else:
            ax.hist(values, bins=40, color=COLOR)
            ax.set_xlabel(f"{what} per {unit}")
            ax.set_ylabel(f"{unit}s")
    return _svg(fig)


def classes_chart(stats: dict[str, Any]) -> bytes | None:
    rows = stats["labels"]["classes"]
    if not rows:
        return None
    top = sorted(rows, key=lambda r: (-r["count"], r["label"]))[:BAR_LIMIT]
    fig = _figure(max(2.0, 0.6 + 0.18 * len(top)))
    names = [r["name"] if r["name"] is not None else str(r["label"]) for r in top]
    _bars(fig.add_subplot(), names, [r["count"] for r in top], "samples read")
    return _svg(fig)


def sizes_chart(stats: dict[str, Any]) -> bytes | None:
    points = stats["image_sizes"]["points"]
    if not points:
        return None
    fig = _figure(3.4)
    ax = fig.add_subplot()
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=9, alpha=0.5, color=COLOR)
    ax.set_xlabel("width (px)")
    ax.set_ylabel("height (px)")
    return _svg(fig)


def videos_chart(stats: dict[str, Any]) -> bytes | None:
    """A histogram of the videos' lengths in seconds."""
    durations = stats["videos"]["durations"]
    if not durations:
        return None
    fig = _figure(2.6)
    ax = fig.add_subplot()
    ax.hist(durations, bins=min(40, max(5, len(durations) // 2)), color=COLOR)
    ax.set_xlabel("length (s)")
    ax.set_ylabel("videos")
    return _svg(fig)


def counts_chart(rows: Sequence[dict[str, Any]], xlabel: str) -> bytes | None:
    """Bars of ``{"name", "count"}`` rows (formats, member sets, skip reasons)."""
    if not rows:
        return None
    top = list(rows)[:BAR_LIMIT]
    fig = _figure(max(1.6, 0.6 + 0.22 * len(top)))
    _bars(fig.add_subplot(), [r["name"] for r in top], [r["count"] for r in top], xlabel)
    return _svg(fig)


def all_charts(stats: dict[str, Any]) -> dict[str, bytes]:
    """Chart name -> SVG bytes, for the charts that have something to show."""
    charts = {
        "shards": shards_chart(stats),
        "classes": classes_chart(stats),
        "sizes": sizes_chart(stats),
        "videos": videos_chart(stats),
        "formats": counts_chart(stats["formats"], "samples"),
        "members": counts_chart(stats["members"], "samples"),
        "skipped": counts_chart(stats["skipped"]["reasons"], "inputs skipped at pack time"),
    }
    return {name: svg for name, svg in charts.items() if svg is not None}
