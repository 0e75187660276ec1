"""The numbers of a report: the data set's from its manifest, the samples' from their headers.

Pure: a :class:`DataSet` and the :class:`Facts` of the samples read in, a dict out (what
``--json`` prints and the charts and tables are drawn from). Counts over samples say how many
samples they come from; only the manifest's figures cover the whole data set.
"""

from __future__ import annotations

import statistics as st
from collections import Counter
from collections.abc import Sequence
from typing import Any

from wdstool.show.facts import Facts
from wdstool.show.source import DataSet

SKIPPED_LISTED = 100  # skipped inputs listed one by one (all are counted)


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """min, median, mean and max of ``values`` (None for none)."""
    if not values:
        return None
    return {
        "min": min(values),
        "median": st.median(values),
        "mean": round(st.fmean(values), 1),
        "max": max(values),
    }


def shard_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def statistics(ds: DataSet, facts: Sequence[Facts]) -> dict[str, Any]:
    """Every figure a report shows."""
    return {
        "dataset": {
            "source": ds.source,
            "format": "tar" if ds.parquet is None else "parquet",
            "manifest": ds.manifest_url,
            "name": ds.name,
            "shards": len(ds.shards),
            "samples": ds.num_samples,
            "bytes": ds.total_bytes,
            "classes": len(ds.classes),
        },
        "shards": _shards(ds),
        "sampled": len(facts),
        "labels": _labels(ds, facts),
        "image_sizes": _sizes(facts),
        "videos": _videos(facts),
        "formats": _count(_format_name(f) for f in facts),
        "members": _count("+".join(f.exts) or "(none)" for f in facts),
        "rotated": sum(1 for f in facts if f.image and f.image.orientation not in (None, 1)),
        "skipped": _skipped(ds),
    }


def _count(items) -> list[dict[str, Any]]:
    """[{"name", "count"}], most common first (ties by name)."""
    counts = Counter(items)
    return [
        {"name": k, "count": n} for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def _shards(ds: DataSet) -> dict[str, Any]:
    counts = [s.nsamples for s in ds.shards if s.nsamples is not None]
    return {
        "samples": spread(counts) if len(counts) == len(ds.shards) else None,
        "bytes": spread([s.filesize for s in ds.shards]),
        "each": [
            {"name": shard_name(s.url), "samples": s.nsamples, "bytes": s.filesize}
            for s in ds.shards
        ],
    }


def _labels(ds: DataSet, facts: Sequence[Facts]) -> dict[str, Any]:
    counts = Counter(f.label for f in facts if f.label is not None)
    rows = [
        {
            "label": label,
            "name": ds.classes[label] if 0 <= label < len(ds.classes) else None,
            "count": n,
        }
        for label, n in sorted(counts.items())
    ]
    return {
        "labelled": sum(counts.values()),
        "unlabelled": len(facts) - sum(counts.values()),
        "distinct": len(counts),
        "classes": rows,
    }


def _sizes(facts: Sequence[Facts]) -> dict[str, Any]:
    known = [f.image for f in facts if f.image and f.image.width and f.image.height]
    return {
        "images": len(known),
        "width": spread([i.width for i in known]),  # type: ignore[misc]
        "height": spread([i.height for i in known]),  # type: ignore[misc]
        "bytes": spread([i.nbytes for i in known]),
        "points": [[i.width, i.height] for i in known],
        "no_image": sum(1 for f in facts if f.image is None),
    }


def _videos(facts: Sequence[Facts]) -> dict[str, Any]:
    """Videos counted, and the spread of their facts (those whose facts are known)."""
    videos = [f.video for f in facts if f.video is not None]
    known = [v.info for v in videos if v.info is not None]
    return {
        "videos": len(videos),
        "unknown": len(videos) - len(known),  # no facts in the shard (no .json "video")
        "seconds": spread([round(i.duration, 3) for i in known]),
        "fps": spread([round(i.fps, 3) for i in known]),
        "frames": spread([i.frames for i in known]),
        "width": spread([i.width for i in known]),
        "height": spread([i.height for i in known]),
        "bytes": spread([v.nbytes for v in videos]),
        "audio": sum(1 for i in known if i.audio_rate),
        "durations": [round(i.duration, 3) for i in known],
    }


def _format_name(f: Facts) -> str:
    if f.video is not None:  # the container and codec: "mp4 h264"
        codec = f.video.info.codec if f.video.info is not None else ""
        return f"{f.video.format} {codec}".strip()
    if f.image is None:
        return "no image or video"
    name = f.image.format
    if f.image.subsampling:
        name += f" {f.image.subsampling}"
    if f.image.progressive:
        name += " progressive"
    return name


def _skipped(ds: DataSet) -> dict[str, Any]:
    reasons = Counter(
        str(s.get("reason", "")).split(":", 1)[0] or "(no reason)" for s in ds.skipped
    )
    return {
        "count": len(ds.skipped),
        "reasons": [{"name": k, "count": n} for k, n in reasons.most_common()],
        "inputs": [
            {"path": str(s.get("path", "")), "reason": str(s.get("reason", ""))}
            for s in ds.skipped[:SKIPPED_LISTED]
        ],
    }
