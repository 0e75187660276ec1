"""What the report page shows, as plain values for the template: tiles, rows of views, charts
with their tables, the header's facts. Text stays raw here; the template escapes it."""

from __future__ import annotations

from typing import Any

from wdstool.base.params import format_size
from wdstool.format.tar_safety import printable_name
from wdstool.show.facts import ImageFacts, VideoFacts, label_text
from wdstool.show.stats import shard_name

CHART_TITLES = {
    "shards": "Samples and bytes per shard (manifest)",
    "classes": "Classes in the samples read",
    "sizes": "Image sizes",
    "videos": "Video lengths",
    "formats": "Formats and chroma subsampling (videos: container and codec)",
    "members": "Members per sample",
    "skipped": "Inputs skipped at pack time (manifest)",
}


PARQUET_TITLES = {
    "shards": "Rows and bytes per file (Parquet footers)",
    "members": "Columns read per row",
}


def _n(v: float | int | None) -> str:
    if v is None:
        return "—"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f}"
    return f"{int(v):,}"


def image_text(image: ImageFacts | None) -> str:
    if image is None:
        return "no image member"
    size = f"{image.width}×{image.height}" if image.width else "size unknown"
    parts = [size, image.format + (f" {image.subsampling}" if image.subsampling else "")]
    if image.progressive:
        parts.append("progressive")
    parts.append(format_size(image.nbytes))
    if image.orientation not in (None, 1):
        parts.append(f"EXIF orientation {image.orientation} (not applied)")
    return ", ".join(parts)


def video_text(video: VideoFacts) -> str:
    """A video's facts as a tile shows them: size, container and codec, length, rate, audio."""
    info = video.info
    if info is None:
        return f"{video.format} video, facts unknown, {format_size(video.nbytes)}"
    audio = "no audio"
    if info.audio_rate:
        channels = {1: "mono", 2: "stereo"}.get(info.audio_channels, f"{info.audio_channels} ch")
        audio = f"audio {info.audio_rate / 1000:g} kHz {channels}"
    return ", ".join(
        [
            f"{info.width}×{info.height}",
            f"{video.format} {info.codec}".strip(),
            f"{info.duration:.2f} s",
            f"{info.fps:g} fps",
            f"{info.frames:,} frames",
            audio,
            format_size(video.nbytes),
        ]
    )


def _full(n: int, files: dict[str, bytes]) -> str | None:
    """The full image (or the video) of sample ``n`` in the report's files."""
    names = (f"images/{n:04d}.", f"videos/{n:04d}.")
    return next((p for p in files if p.startswith(names)), None)


def _where(url: str, f) -> str:
    """Where a sample is: its shard and offset, or a Parquet row's file, row and row group."""
    if f.row_group is not None:
        return f"{shard_name(url)} row {f.offset:,} (row group {f.row_group}) · {'+'.join(f.exts)}"
    return f"{shard_name(url)} @ {f.offset:,} · {'+'.join(f.exts)}"


def _tile(s, files: dict[str, bytes]) -> dict[str, Any]:
    f = s.picked.facts
    meta = s.meta
    full = _full(s.n, files)
    h, w = s.thumb.shape[:2] if s.thumb is not None else (0, 0)
    video = s.video
    return {
        "n": s.n,
        "key": s.key,
        "thumb": f"thumbs/{s.n:04d}.jpg" if s.thumb is not None else None,
        "thumb_w": w,
        "thumb_h": h,
        "full": full,
        "video": video is not None,
        "nopic": s.problem or "",
        "label_text": label_text(meta, none="no label"),
        "fields": list(meta.fields),
        "image_text": s.doc.line()
        if s.doc is not None
        else image_text(f.image)
        if video is None
        else video_text(video),
        "shard": _where(s.picked.url, f),
        "problems": [*meta.problems, *([s.problem] if s.problem else [])],
    }


def _views(views, pictured, files: dict[str, bytes], seed: int) -> dict[str, Any] | None:
    """The model's-view table: ``views`` were made for ``pictured`` (the samples with a
    picture), in that order."""
    if views is None:
        return None
    notes = []
    if views.stand_ins:
        keys = ", ".join(pictured[i].key for i in views.stand_ins[:5])
        notes.append(
            f"{len(views.stand_ins)} keys cannot be written to a tar header as they are "
            f"({keys}); their views use a stand-in key and differ from training's."
        )
    if views.rescaled:
        notes.append("A recipe gave floats outside 0..1: each such image is stretched to show it.")
    return {
        "about": f"Each sample as make_loader delivers it to the model with seed {seed}. The "
        "built-in recipes (default, eval) draw a sample's augmentation from (seed, epoch, key) "
        "alone, so with them these are exactly the pixels of those epochs of a training run "
        "with that seed and image size.",
        "notes": notes,
        "columns": [c.title for c in views.columns],
        "rows": [
            {
                "n": s.n,
                "key": s.key,
                "thumb": f"thumbs/{s.n:04d}.jpg",
                "full": _full(s.n, files),
                "images": [f"views/{s.n:04d}-{c}.jpg" for c in range(len(views.columns))],
            }
            for s in pictured
        ],
    }


def _spread_rows(columns: list[dict[str, Any] | None], scale: list[float]) -> list[list[str]]:
    rows = []
    for what in ("min", "median", "mean", "max"):
        rows.append(
            [what]
            + [_n(None if c is None else c[what] / k) for c, k in zip(columns, scale, strict=True)]
        )
    return rows


def _table(name: str, stats: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    if name == "shards":
        sh = stats["shards"]
        rows = _spread_rows([sh["samples"], sh["bytes"]], [1, 1e6])
        d = stats["dataset"]
        rows.append(["total", _n(d["samples"]), _n(d["bytes"] / 1e6)])
        rows.append(["shards", _n(d["shards"]), ""])
        return ["per shard", "samples", "MB"], rows
    if name == "classes":
        rows = sorted(stats["labels"]["classes"], key=lambda r: (-r["count"], r["label"]))
        return ["class", "label", "samples"], [
            [r["name"] if r["name"] is not None else "", _n(r["label"]), _n(r["count"])]
            for r in rows
        ]
    if name == "sizes":
        sz = stats["image_sizes"]
        rows = _spread_rows([sz["width"], sz["height"], sz["bytes"]], [1, 1, 1e3])
        return ["per image", "width", "height", "KB"], rows
    if name == "videos":
        v = stats["videos"]
        columns = [v["seconds"], v["fps"], v["width"], v["height"], v["bytes"]]
        rows = _spread_rows(columns, [1, 1, 1, 1, 1e6])
        rows.append(["with audio", _n(v["audio"]), "", "", "", ""])
        return ["per video", "seconds", "fps", "width", "height", "MB"], rows
    rows_of = {
        "formats": stats["formats"],
        "members": stats["members"],
        "skipped": stats["skipped"]["reasons"],
    }[name]
    header = {"formats": "format", "members": "members", "skipped": "reason"}[name]
    return [header, "count"], [[r["name"], _n(r["count"])] for r in rows_of]


def _facts(ds, stats) -> list[tuple[str, str]]:
    d = stats["dataset"]
    facts = [("source", ds.source)]
    if ds.manifest_url:
        facts.append(("manifest", ds.manifest_url))
    if ds.name:
        facts.append(("name", ds.name))
    samples = "unknown (no manifest)" if d["samples"] is None else _n(d["samples"])
    pq = ds.parquet
    if pq is not None:
        facts += [
            ("Parquet files", _n(d["shards"])),
            ("row groups", _n(pq.row_groups)),
            ("rows", samples),
            ("bytes", format_size(d["bytes"])),
            ("columns", pq.columns),
            ("image column", pq.image),
            ("label column", pq.label or "none"),
        ]
    else:
        facts += [
            ("shards", _n(d["shards"])),
            ("samples", samples),
            ("bytes", format_size(d["bytes"])),
        ]
    if ds.classes:
        shown = ", ".join(printable_name(c) for c in ds.classes[:12])
        more = f" … ({len(ds.classes)} in all)" if len(ds.classes) > 12 else ""
        facts.append(("classes", shown + more))
    if stats["skipped"]["count"]:
        facts.append(("skipped at pack", _n(stats["skipped"]["count"])))
    return facts


def page_context(
    *, ds, config, drawn, shown, pictured, stats, views, charts, files
) -> dict[str, Any]:
    """The template's variables (``pictured``: the shown samples with a picture, for whom
    ``views`` were made)."""
    walked = len(drawn.facts) - len(shown)
    parquet = ds.parquet is not None
    how = (
        "Every sample of the data set."
        if drawn.every_sample
        else f"{len(shown)} rows drawn with seed {config.seed} (every row equally likely), in "
        "file order."
        if parquet
        else f"{len(shown)} samples drawn with seed {config.seed} (a sample's chance is its "
        "share of the shard's bytes), in shard order."
    )
    about = (
        "Files, rows and bytes per file come from the Parquet footers (the whole data set); "
        f"the rest from {len(drawn.facts)} rows: the {len(shown)} shown and {walked} more "
        "from the row groups read for them."
        if parquet
        else "Shards, samples and bytes per shard come from the manifest (the whole data set); "
        f"the rest from {len(drawn.facts)} samples: the {len(shown)} shown and {walked} more "
        "whose headers were read after them."
    )
    titles = {**CHART_TITLES, **(PARQUET_TITLES if parquet else {})}
    return {
        "title": ds.name or ds.source,
        "summary": f"{len(shown)} samples of {ds.source}",
        "facts": _facts(ds, stats),
        "drawn": how,
        "tiles": [_tile(s, files) for s in shown],
        "videos": any(s.video is not None for s in shown),
        "views": _views(views, pictured, files, config.seed),
        "stats_about": about,
        "charts": [
            {"id": name, "title": titles[name], "svg": f"charts/{name}.svg"}
            | dict(zip(("headers", "rows"), _table(name, stats), strict=True))
            for name in CHART_ORDER
            if name in charts
        ],
        "skipped": stats["skipped"],
    }


CHART_ORDER = ("shards", "classes", "sizes", "videos", "formats", "members", "skipped")
