"""``build_report``: draw samples, read only them, and write what was asked for: the report
folder (contact sheet, what the model sees, statistics), a contact-sheet PNG, the numbers.

A sample with a video member is pictured by a strip of its frames (:mod:`wdstool.show.strip`,
its middle frame on the contact-sheet PNG) and links to the video itself where a browser plays
it; a sample of several images by a strip of its images, its text beside them
(:mod:`wdstool.show.documents`); what the model sees is shown for samples of one image only."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from wdstool import __version__
from wdstool.base.errors import ConfigError, DestinationError, SampleError
from wdstool.format.fields import FieldSpec, LabelSpec
from wdstool.format.images import kind
from wdstool.format.interleaved import is_interleaved
from wdstool.format.tar_safety import printable_name
from wdstool.format.video import video_kind
from wdstool.show.charts import all_charts
from wdstool.show.documents import DocFacts, doc_facts
from wdstool.show.draw import draw
from wdstool.show.facts import (
    Meta,
    VideoFacts,
    as_text,
    image_ext,
    json_safe,
    label_text,
    read_meta,
)
from wdstool.show.page import page_context
from wdstool.show.parquet_draw import draw_rows, open_source
from wdstool.show.ranged import ReadCounter
from wdstool.show.report_folder import check_out_dir, render_html, write_report
from wdstool.show.show_config import ShowConfig
from wdstool.show.stats import shard_name, statistics
from wdstool.show.walk import Picked, Wanted

if TYPE_CHECKING:
    from wdstool.show.views import Views

Progress = Callable[[int, int], None]  # (steps just done, steps in all)
BROWSER_FORMATS = {"jpeg": "jpg", "png": "png", "webp": "webp", "gif": "gif"}
BROWSER_VIDEOS = ("mp4", "webm")  # containers copied into the report, for the browser to play
VIDEO_COPY_MAX = 16 << 20  # ... when no larger (a larger one: its strip links to itself)


@dataclass(frozen=True, kw_only=True)
class Shown:
    """A shown sample: where it is, what it carries, and its thumbnail (None: undecodable): a
    video's is a strip of ``frames`` frames, and ``video`` its facts (its header's where the
    shard had none); a sample of several images: a strip of them, ``doc`` its facts."""

    n: int
    picked: Picked
    meta: Meta
    thumb: np.ndarray | None
    problem: str | None  # why there is no thumbnail
    video: VideoFacts | None = None
    frames: int = 1
    doc: DocFacts | None = None

    @property
    def key(self) -> str:
        return printable_name(self.picked.facts.key)

    @property
    def poster(self) -> np.ndarray | None:
        """The thumbnail, or a video's middle frame."""
        if self.thumb is None or self.video is None:
            return self.thumb
        from wdstool.show.strip import poster

        return poster(self.thumb, self.frames)


class _Steps:
    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress, self.total = progress, total

    def __call__(self, n: int) -> None:
        if self.progress is not None:
            self.progress(n, self.total)


def build_report(
    source: str,
    config: ShowConfig,
    *,
    out_dir: str | None = None,
    png: str | None = None,
    storage_options: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Read the manifest of ``source`` and the samples ``config`` draws (nothing else), then
    write ``out_dir`` (a report folder) and/or ``png`` (the contact sheet); return the numbers.
    Parquet files (:mod:`wdstool.show.parquet_draw`): their footers, and the row groups of
    the rows drawn."""
    if out_dir is not None:
        check_out_dir(out_dir)
    if png is not None and not os.path.isdir(os.path.dirname(os.path.abspath(png))):
        raise DestinationError(f"{png}: its folder does not exist")
    columns = config.columns() if out_dir is not None else ()
    ds, rows = open_source(source, config, storage_options)

    planned = min(config.samples, ds.num_samples or config.samples)
    pictures = out_dir is not None or png is not None
    steps = _Steps(progress, planned * (1 + pictures + len(columns)) + 1)
    counter = ReadCounter()
    if rows is None:
        label, fields = config.label_spec, config.field_specs
        wanted = Wanted(
            exts=frozenset(spec.ext for _, spec in fields) | ({label.ext} if label else set()),
            label=label,
        )
        drawn = draw(
            ds,
            samples=config.samples,
            seed=config.seed,
            header_samples=config.walks[0],
            walk_share=config.walks[1],
            wanted=wanted,
            counter=counter,
            storage_options=storage_options,
            progress=steps,
        )
    else:  # Parquet: the columns the config names, as the rows' members
        label, fields = rows.label, rows.fields
        drawn = draw_rows(
            ds,
            rows,
            samples=config.samples,
            seed=config.seed,
            header_samples=config.walks[0],
            counter=counter,
            storage_options=storage_options,
            progress=steps,
        )
    shown = [
        _show(n, p, (label, fields), ds.classes, pictures, steps)
        for n, p in enumerate(drawn.picked)
    ]
    stats = statistics(ds, drawn.facts)
    views = None
    # what the image loader can decode
    pictured = [s for s in shown if s.thumb is not None and s.video is None and s.doc is None]
    # torch and the decoders load only for pictures, once the data set is found: a wrong
    # SOURCE fails at once, and --json alone reads headers without them
    if columns and pictured:
        from wdstool.show.views import model_views

        views = model_views(
            [(s.picked.facts.key, _ext(s), s.picked.parts[_ext(s)]) for s in pictured],
            columns,
            seed=config.seed,
            image_size=config.image_size,
            progress=steps,
        )
    if out_dir is not None:
        _write_folder(out_dir, ds, config, drawn, shown, pictured, stats, views)
    if png is not None:
        from wdstool.show.sheet import contact_sheet, save_png

        tiles = [(s.poster, [s.key, label_text(s.meta) or _text(s)]) for s in shown]
        save_png(
            contact_sheet(tiles, f"{ds.source}: {len(shown)} samples, seed {config.seed}"), png
        )
    steps(1)
    return _summary(ds, config, drawn, shown, stats, views, counter, out_dir, png)


def _text(s: Shown) -> str:
    """A sample of several images' text (for a contact-sheet tile), else ""."""
    return s.doc.text if s.doc is not None else ""


def _ext(s: Shown) -> str:
    ext = image_ext(s.picked.parts)
    assert ext is not None
    return ext


def _show(
    n: int,
    p: Picked,
    read: tuple[LabelSpec | None, tuple[tuple[str, FieldSpec], ...]],
    classes: tuple[str, ...],
    pictures: bool,
    steps,
) -> Shown:
    meta = read_meta(p.parts, *read, classes)
    if is_interleaved(p.parts):
        shown = _show_doc(n, p, meta, pictures)
        if pictures:
            steps(1)
        return shown
    if p.facts.video is not None:
        shown = _show_video(n, p, meta, pictures)
        if pictures:
            steps(1)
        return shown
    thumb, problem = None, None
    ext = image_ext(p.parts)
    if ext is None:
        problem = "no image or video member"
    elif pictures:
        from wdstool.show.sheet import thumbnail

        try:
            thumb = thumbnail(
                p.parts[ext], where=f"{p.url}: sample {printable_name(p.facts.key)!r}"
            )
        except SampleError as exc:
            problem = exc.message
    if pictures:
        steps(1)
    return Shown(n=n, picked=p, meta=meta, thumb=thumb, problem=problem)


def _show_doc(n: int, p: Picked, meta: Meta, pictures: bool) -> Shown:
    """A sample of several images: its text first among its fields, a strip of its images
    when ``pictures``; an image that does not decode is its tile's problem."""
    doc = doc_facts(p.parts)
    problems = (*meta.problems, *([doc.problem] if doc.problem else []))
    meta = dataclasses.replace(
        meta,
        fields=(("text", as_text(doc.text)), *meta.fields),
        values={"text": doc.text, **meta.values},
        problems=problems,
    )
    thumb, problem = None, None
    if pictures:
        from wdstool.show.documents import doc_strip

        try:
            thumb = doc_strip(p.parts, where=f"{p.url}: sample {printable_name(p.facts.key)!r}")
        except SampleError as exc:
            problem = exc.message
    return Shown(n=n, picked=p, meta=meta, thumb=thumb, problem=problem, doc=doc)


def _show_video(n: int, p: Picked, meta: Meta, pictures: bool) -> Shown:
    """A video sample, with its strip when ``pictures``; a video that does not decode (or no
    decoder here) is its tile's problem, not the report's."""
    video = p.facts.video
    assert video is not None
    if not pictures:
        return Shown(n=n, picked=p, meta=meta, thumb=None, problem=None, video=video)
    from wdstool.show.strip import video_strip

    where = f"{p.url}: sample {printable_name(p.facts.key)!r}"
    try:
        strip, frames, info = video_strip(p.parts[video.ext], video.info, where)
    except (SampleError, ConfigError) as exc:
        return Shown(n=n, picked=p, meta=meta, thumb=None, problem=exc.message, video=video)
    video = dataclasses.replace(video, info=info)
    return Shown(n=n, picked=p, meta=meta, thumb=strip, problem=None, video=video, frames=frames)


def _write_folder(out_dir, ds, config, drawn, shown, pictured, stats, views: Views | None) -> None:
    from wdstool.format.decode import decode_rgb
    from wdstool.show.sheet import encode_jpeg, encode_png

    files: dict[str, bytes] = {}
    for s in shown:
        if s.thumb is None:
            continue
        files[f"thumbs/{s.n:04d}.jpg"] = encode_jpeg(s.thumb)
        if s.doc is not None:  # the strip is the picture
            continue
        if s.video is not None:
            data = s.picked.parts[s.video.ext]
            container = video_kind(data)
            if container in BROWSER_VIDEOS and len(data) <= VIDEO_COPY_MAX:
                files[f"videos/{s.n:04d}.{container}"] = data
            continue
        data = s.picked.parts[_ext(s)]
        browser = BROWSER_FORMATS.get(kind(data))
        if browser is not None:
            files[f"images/{s.n:04d}.{browser}"] = data
        else:  # TIFF, BMP, PPM, ...: as the loader decodes them
            pixels = decode_rgb(data).permute(1, 2, 0).numpy()
            files[f"images/{s.n:04d}.png"] = encode_png(np.ascontiguousarray(pixels))
    if views is not None:
        for s, images in zip(pictured, views.images, strict=True):
            for c, pixels in enumerate(images):
                files[f"views/{s.n:04d}-{c}.jpg"] = encode_jpeg(pixels, quality=92)
    charts = all_charts(stats)
    files.update({f"charts/{name}.svg": svg for name, svg in charts.items()})
    context = page_context(
        ds=ds,
        config=config,
        drawn=drawn,
        shown=shown,
        pictured=pictured,
        stats=stats,
        views=views,
        charts=sorted(charts),
        files=files,
    )
    write_report(out_dir, render_html({**context, "version": __version__}), files)


def _summary(ds, config, drawn, shown, stats, views, counter, out_dir, png) -> dict[str, Any]:
    shown_bytes = sum(s.picked.facts.nbytes for s in shown)
    return {
        "source": ds.source,
        "out": out_dir,
        "png": png,
        "seed": config.seed,
        "every_sample": drawn.every_sample,
        "samples": [
            {
                "n": s.n,
                "key": s.picked.facts.key,
                "shard": shard_name(s.picked.url),
                "offset": s.picked.facts.offset,
                **(
                    {}
                    if s.picked.facts.row_group is None
                    else {"row": s.picked.facts.offset, "row_group": s.picked.facts.row_group}
                ),
                "bytes": s.picked.facts.nbytes,
                "members": list(s.picked.facts.exts),
                "label": s.meta.label,
                "class": s.meta.class_name,
                "fields": json_safe(s.meta.values),
                "image": None if s.picked.facts.image is None else vars_of(s.picked.facts.image),
                "video": None if s.video is None else s.video.to_json(),
                **({} if s.doc is None else {"interleaved": s.doc.to_json()}),
                "problems": [*s.meta.problems, *([s.problem] if s.problem else [])],
            }
            for s in shown
        ],
        "statistics": stats,
        "views": None
        if views is None
        else {"columns": [c.title for c in views.columns], "stand_ins": list(views.stand_ins)},
        "reads": {
            "bytes": counter.bytes + ds.manifest_bytes,
            "requests": counter.requests + ds.index_requests,
            "manifest_bytes": ds.manifest_bytes,
            "shown_bytes": shown_bytes,
            "ratio": round(
                (counter.bytes + ds.manifest_bytes) / max(1, shown_bytes + ds.manifest_bytes), 3
            ),
        },
    }


def vars_of(obj: Any) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in obj.__dataclass_fields__}
