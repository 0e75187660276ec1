"""The tar members of one sample, and the bytes the layout reserves for them.

Every sample has ``KEY.<ext>`` (the image or the video, its original bytes; the extension from
its bytes: ``jpg``, ``png``, ..., ``mp4``, ``webm``, ``mkv``, ``mov``, ``avi``) and ``KEY.json``; a
labelled one ``KEY.cls`` (the class index, ASCII digits); every sample of a listing with a caption
column ``KEY.txt`` (UTF-8; empty for a row without a caption), so that the samples of one data
set carry the same members (readers that infer columns from the first samples, as Hugging Face
``datasets`` does, see every member).
``KEY.json`` holds ``path``, ``width``, ``height``, ``format`` and, with a label, ``class_index``
and ``class`` (a class name; absent for integer labels), plus a listing row's other columns,
which win over those keys when a listing has a column of the same name; a video's ``format`` is
its container (``"mp4"``) and ``"video"`` holds its probed facts
(:meth:`wdstool.format.video.VideoInfo.to_json`: frames, fps, duration, keyframes, codec, ...;
they win over a listing column named ``video``: the loaders draw clips from them). It is
canonical JSON (sorted keys, ASCII), so the same sample always gives the same bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from shard_writer.probe import ImageInfo
from shard_writer.scan import SourceFile, printable
from wdstool.format.manifest import VideoTotals
from wdstool.format.tar_write import member_bytes, member_size

# The .json member (relative path, class, width, height, format) fits one block unless the path
# is long; this bound is what the layout reserves for it (plus a listing row's extra columns).
_JSON_OVERHEAD = 128
_VIDEO_KEY = len(',"video":')


def json_bound(relpath: str, class_name: str) -> int:
    """Upper bound of the .json member's own fields (exact sizes vary with digits)."""
    return (
        _JSON_OVERHEAD + len(relpath.encode("utf-8", "surrogateescape")) * 6 + len(class_name) * 6
    )


def _class_name(f: SourceFile, classes: Sequence[str]) -> str:
    return classes[f.class_idx] if classes and f.class_idx >= 0 else ""


def sample_bound(f: SourceFile, payload_size: int, classes: Sequence[str], video: str = "") -> int:
    """Bytes the sample's members take in a shard, at most (headers and padding included);
    ``video``: a video's facts (ImageInfo.video), which its ``KEY.json`` carries as they are."""
    facts = _VIDEO_KEY + len(video) if video else 0
    need = member_bytes(payload_size) + member_bytes(
        json_bound(f.relpath, _class_name(f, classes)) + len(f.extra) + facts
    )
    if f.class_idx >= 0:
        need += member_bytes(len(str(f.class_idx)))
    if f.caption is not None:
        need += member_bytes(len(f.caption.encode("utf-8")))
    if f.key:  # a key the source gives may be long or not ASCII: pax records, a member each
        members = 2 + (f.class_idx >= 0) + (f.caption is not None)
        need += members * (member_size(f"{f.key}.xxxxx", 0) - member_bytes(0))
    return need


def metadata(f: SourceFile, info: ImageInfo, classes: Sequence[str]) -> bytes:
    """The ``KEY.json`` payload."""
    meta: dict[str, object] = {
        "path": printable(f.relpath),
        "width": info.width,
        "height": info.height,
        "format": info.fmt.lower(),
    }
    if f.class_idx >= 0:
        meta["class_index"] = f.class_idx
        if classes:
            meta["class"] = classes[f.class_idx]
    if f.extra:
        meta.update(json.loads(f.extra))  # a listing's own column wins
    if info.video:
        meta["video"] = json.loads(info.video)  # but not over the facts the loaders read
    return json.dumps(meta, sort_keys=True, separators=(",", ":")).encode("ascii")


def sample_members(
    f: SourceFile, info: ImageInfo, key: str, payload: bytes, classes: Sequence[str]
) -> list[tuple[str, bytes]]:
    """(member name, bytes) of one sample, in the order they are written."""
    members = [(f"{key}.{info.ext}", payload)]
    if f.class_idx >= 0:
        members.append((f"{key}.cls", b"%d" % f.class_idx))
    if f.caption is not None:  # a caption column: every sample has KEY.txt, empty or not
        members.append((f"{key}.txt", f.caption.encode("utf-8")))
    members.append((f"{key}.json", metadata(f, info, classes)))
    return members


def mixed_image_members(infos: Sequence[ImageInfo]) -> str | None:
    """Why the samples will not carry one member set when their images (or videos) are in
    several formats (the member's extension is the format's), or None when they are in one."""
    counts = Counter(info.ext for info in infos)
    if len(counts) < 2:
        return None
    shown = ", ".join(f"{n} KEY.{ext}" for ext, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    if any(info.video for info in infos):
        return (
            f"the samples are in {len(counts)} formats ({shown}), so samples carry different "
            "image or video members; readers that take their columns from the first samples "
            "(Hugging Face datasets) miss the others"
        )
    return (
        f"the images are in {len(counts)} formats ({shown}), so samples carry different image "
        "members; readers that take their columns from the first samples (Hugging Face "
        "datasets) miss the others. quality=Q re-encodes every image as JPEG (KEY.jpg)"
    )


def video_totals(infos: Sequence[ImageInfo]) -> VideoTotals:
    """How many of the probed inputs are videos, and their duration in all (seconds)."""
    count, seconds = 0, 0.0
    for info in infos:
        if info.video:
            count += 1
            seconds += float(json.loads(info.video)["duration"])
    return VideoTotals(count, seconds)
