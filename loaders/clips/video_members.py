"""A clips loader's members of a sample: its video (else its image) and the facts pack probed."""

from __future__ import annotations

import json
from typing import Any

from wdstool.base.errors import SampleError
from wdstool.format.images import IMAGE_ORDER
from wdstool.format.mapped import materialized
from wdstool.format.video import VIDEO_ORDER, VideoInfo


def media_part(sample: Any, url: str) -> tuple[bytes, bool]:
    """(the video's bytes, True), else (the image's, False); SampleError naming the sample
    when it has neither (``sample``: a ``wdstool.format.tar_read.Sample``)."""
    parts = sample.parts
    for ext in VIDEO_ORDER:
        if ext in parts:
            return materialized(parts[ext]), True  # type: ignore[return-value]
    for ext in IMAGE_ORDER:
        if ext in parts:
            return materialized(parts[ext]), False  # type: ignore[return-value]
    raise SampleError(f"{url}: sample {sample.key!r} has neither a video nor an image member")


def video_facts(sample: Any) -> VideoInfo | None:
    """The video's facts from ``KEY.json`` (what pack probed); None without them (a foreign
    shard: the decoder reads the container's header instead)."""
    raw = sample.parts.get("json")
    if raw is None:
        return None
    try:
        obj = json.loads(bytes(materialized(raw)))
    except (ValueError, UnicodeDecodeError):
        return None
    return VideoInfo.from_json(obj.get("video")) if isinstance(obj, dict) else None


__all__ = ["media_part", "video_facts"]
