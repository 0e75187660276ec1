"""What one sample says about itself, from its members' bytes (or an image's first bytes):
the image's format, size and chroma subsampling, a video's container and the facts ``pack``
probed (``KEY.json``'s ``"video"``), its label, caption and fields as text.

Never decodes pixels (a JPEG's or PNG's header is parsed here; other formats' headers by PIL,
which reads no pixel data to report a size) and never unpickles anything: a member that is
not text or JSON is shown as its size in bytes.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wdstool.format.fields import FieldError, FieldSpec, LabelSpec
from wdstool.format.images import (
    IMAGE_ORDER,
    fast_header,
    jpeg_exif_orientation,
    jpeg_frame,
    kind,
)
from wdstool.format.video import VIDEO_ORDER, VideoInfo, video_kind

# a video's facts in --json (its keyframes left out)
VIDEO_FIELDS = (
    "frames",
    "fps",
    "duration",
    "width",
    "height",
    "codec",
    "audio_rate",
    "audio_channels",
)
FIELD_TEXT_LIMIT = 400  # characters of a field shown on a tile (the JSON output has them all)


@dataclass(frozen=True, kw_only=True)
class ImageFacts:
    ext: str  # the member's extension
    format: str  # from the bytes, not the name: jpeg, png, webp, gif, ... or unknown
    width: int | None
    height: int | None
    nbytes: int
    subsampling: str | None = None  # JPEG only
    progressive: bool | None = None  # JPEG only
    orientation: int | None = None  # a JPEG's EXIF orientation (not applied by the loader)


@dataclass(frozen=True, kw_only=True)
class VideoFacts:
    """A video member: its container (from the bytes) and what it holds (``info``: the facts
    ``pack`` probed, from ``KEY.json``; or, for a shown sample, its header; None: unknown)."""

    ext: str  # the member's extension
    format: str  # from the bytes: mp4, webm, mkv, mov, avi, or unknown
    nbytes: int
    info: VideoInfo | None = None

    def to_json(self) -> dict[str, Any]:
        """Its facts as ``--json`` prints them (no keyframes; None where unknown)."""
        info = self.info.to_json() if self.info is not None else {}
        info.pop("keyframes", None)
        out: dict[str, Any] = {"ext": self.ext, "format": self.format, "nbytes": self.nbytes}
        return out | {name: info.get(name) for name in VIDEO_FIELDS}


@dataclass(frozen=True, kw_only=True)
class Facts:
    """One sample as the statistics count it."""

    shard: int
    offset: int  # of its first tar header in the shard (a Parquet row: its row in the file)
    nbytes: int  # its members in the tar: headers, data and padding (a row: its values)
    key: str
    exts: tuple[str, ...]  # every member's extension, in tar order (a row: its columns read)
    label: int | None
    image: ImageFacts | None
    video: VideoFacts | None = None
    row_group: int | None = None  # a Parquet row's row group (None: a tar sample)


@dataclass(frozen=True, kw_only=True)
class Meta:
    """What a tile shows beside the image: label, class name, fields, and what went wrong."""

    label: int | None
    class_name: str | None
    fields: tuple[tuple[str, str], ...]  # (name, value as text)
    values: dict[str, Any]  # (name -> value as read, for --json)
    problems: tuple[str, ...]


def label_text(meta: Meta, none: str = "") -> str:
    """A sample's label as a tile shows it: "class (3)", "label 3", or ``none``."""
    if meta.class_name is not None:
        return f"{meta.class_name} ({meta.label})"
    return none if meta.label is None else f"label {meta.label}"


def image_ext(exts: tuple[str, ...] | Mapping[str, Any]) -> str | None:
    """The member a loader takes as the sample's image (the first in IMAGE_ORDER present)."""
    return next((e for e in IMAGE_ORDER if e in exts), None)


def video_ext(exts: tuple[str, ...] | Mapping[str, Any]) -> str | None:
    """The sample's video member (the first in VIDEO_ORDER present), or None."""
    return next((e for e in VIDEO_ORDER if e in exts), None)


def video_facts(ext: str, head: bytes, nbytes: int, meta: bytes | None) -> VideoFacts:
    """A video member's facts from its first bytes and the sample's ``.json`` member
    (``meta``; its ``"video"`` object as ``pack`` wrote it, ignored when malformed)."""
    info = None
    if meta:
        try:
            obj = json.loads(meta)
        except (ValueError, UnicodeDecodeError):
            obj = None
        info = VideoInfo.from_json(obj.get("video")) if isinstance(obj, dict) else None
    return VideoFacts(ext=ext, format=video_kind(head) or "unknown", nbytes=nbytes, info=info)


def needs_more(head: bytes, size: int) -> bool:
    """True when ``head`` (the first bytes of an image member of ``size`` bytes) stops before
    a JPEG's frame header (a large EXIF or ICC segment in front of it)."""
    return len(head) < size and kind(head) == "jpeg" and jpeg_frame(head) is None


def image_facts(ext: str, head: bytes, nbytes: int) -> ImageFacts:
    """Format, size and (JPEG) subsampling from an image's first bytes."""
    fmt = kind(head)
    if fmt == "jpeg":
        frame = jpeg_frame(head)
        orient = jpeg_exif_orientation(head)
        return ImageFacts(
            ext=ext,
            format="jpeg",
            width=frame.width if frame else None,
            height=frame.height if frame else None,
            nbytes=nbytes,
            subsampling=frame.subsampling if frame else None,
            progressive=frame.progressive if frame else None,
            orientation=orient[1] if orient else None,
        )
    fast = fast_header(head)
    if fast is not None:
        return ImageFacts(
            ext=ext, format=fast[0].lower(), width=fast[1], height=fast[2], nbytes=nbytes
        )
    return _pil_facts(ext, head, nbytes)


def _pil_facts(ext: str, head: bytes, nbytes: int) -> ImageFacts:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(head)) as img:  # parses the header; reads no pixels
            return ImageFacts(
                ext=ext,
                format=(img.format or "unknown").lower(),
                width=img.width,
                height=img.height,
                nbytes=nbytes,
            )
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return ImageFacts(ext=ext, format="unknown", width=None, height=None, nbytes=nbytes)


def read_label(spec: LabelSpec | None, parts: Mapping[str, bytes]) -> tuple[int | None, str | None]:
    """(label, problem): no label member is no label and no problem; a member that does not
    hold an integer is a problem, shown on the sample's tile."""
    if spec is None or spec.ext not in parts:
        return None, None
    try:
        return spec.read(parts), None
    except FieldError as exc:
        return None, f"label: {exc}"


def read_meta(
    parts: Mapping[str, bytes],
    label: LabelSpec | None,
    fields: tuple[tuple[str, FieldSpec], ...],
    classes: tuple[str, ...],
) -> Meta:
    """A sample's label, class name and fields, each as text a tile can show."""
    value, problem = read_label(label, parts)
    problems = [problem] if problem else []
    class_name = classes[value] if value is not None and 0 <= value < len(classes) else None
    if value is not None and classes and class_name is None:
        problems.append(f"label {value} is outside the manifest's {len(classes)} classes")
    shown: list[tuple[str, str]] = []
    values: dict[str, Any] = {}
    cache: dict[str, Any] = {}
    for name, spec in fields:
        try:
            got = spec.read(parts, cache)
        except FieldError as exc:
            problems.append(f"{name}: {exc}")
            continue
        if got is None:
            continue
        values[name] = got if not isinstance(got, bytes) else f"{len(got)} bytes"
        shown.append((name, as_text(got)))
    return Meta(
        label=value,
        class_name=class_name,
        fields=tuple(shown),
        values=values,
        problems=tuple(problems),
    )


def as_text(value: Any) -> str:
    """A field's value as a tile shows it: text as is, bytes as their size, the rest as JSON;
    cut at FIELD_TEXT_LIMIT characters."""
    if isinstance(value, bytes):
        text = f"<{len(value)} bytes>"
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, default=str, allow_nan=True)
    return text if len(text) <= FIELD_TEXT_LIMIT else text[: FIELD_TEXT_LIMIT - 1] + "…"


def json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities (valid in a .json member, not in JSON output) as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value
