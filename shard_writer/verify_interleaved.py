"""``verify``'s checks of a sample of several images (``KEY.0.jpg``, ``KEY.1.png``, ...,
``KEY.json``: :mod:`wdstool.format.interleaved`).

Its ``.json`` lists must agree with its members: every image they name is a member, every
numbered image member is named, in index order, each position a text or an image. Where the
manifest keeps the shard's facts, each sample's image count, text length and image sizes (from
the image headers, or the decoded pixels with ``decode``) must be what it says. With
``decode`` every image is decoded. Any problem is one ShardError naming the shard and the key.
"""

from __future__ import annotations

from typing import Any

from wdstool.base.errors import ShardError, WdsToolError
from wdstool.format.images import IMAGE_EXTENSIONS, fast_header
from wdstool.format.interleaved import (
    image_members,
    is_document,
    is_interleaved,
    member_index,
    sample_lists,
    text_of,
)
from wdstool.format.video import VIDEO_EXTENSIONS

SHOWN = "N.img"  # a member set's stand-in for the numbered images (their count varies)


def member_set(exts: Any) -> list[str]:
    """A sample's member suffixes with its numbered images as one stand-in, so that samples
    with other image counts carry the same member set."""
    return sorted({SHOWN if member_index(e) is not None else e for e in exts})


def is_doc(parts: Any) -> bool:
    """A sample of several images, or a document or conversation without an image member."""
    if is_interleaved(parts):
        return True
    media = any(e in IMAGE_EXTENSIONS or e in VIDEO_EXTENSIONS for e in parts)
    return not media and is_document(parts)


def check_interleaved(
    sample: Any, url: str, decode: bool, sizes: list[tuple[int, int]] | None, chars: int | None
) -> int:
    """Check one sample of several images (``sizes``, ``chars``: what the manifest says of it,
    None where it keeps nothing); return its image count."""
    where = f"{url}: sample {sample.key!r}"
    plain = sorted(e for e in sample.parts if e in IMAGE_EXTENSIONS or e in VIDEO_EXTENSIONS)
    if plain:
        raise ShardError(f"{where}: has numbered images and a .{plain[0]} member")
    meta = sample.parts.get("json")
    if meta is None:
        raise ShardError(
            f"{where}: has numbered images and no .json member (texts and images, or messages)"
        )
    try:
        texts, images = sample_lists(bytes(meta), sample.parts)
    except ValueError as exc:
        raise ShardError(f"{where}: {exc}") from None
    members = image_members(sample.parts)
    if sizes is not None and len(sizes) != len(members):
        raise ShardError(f"{where}: {len(members)} images, the manifest says {len(sizes)}")
    length = len(text_of(texts, images))
    if chars is not None and length != chars:
        raise ShardError(f"{where}: {length} characters of text, the manifest says {chars}")
    for n, ext in enumerate(members):
        got = _size(sample.parts[ext], ext, decode, where)
        if sizes is not None and got is not None and got != sizes[n]:
            raise ShardError(
                f"{where}: .{ext} is {got[0]}x{got[1]}, the manifest says "
                f"{sizes[n][0]}x{sizes[n][1]}"
            )
    return len(members)


def _size(data: Any, ext: str, decode: bool, where: str) -> tuple[int, int] | None:
    """(width, height) of an image member: decoded with ``decode``, else from its header
    (JPEG, PNG; None for other formats)."""
    if not decode:
        head = fast_header(bytes(data[:65536]))
        return None if head is None else (head[1], head[2])
    from wdstool.format.decode import decode_rgb

    try:
        pixels = decode_rgb(bytes(data), ext.split(".", 1)[1])
    except WdsToolError as exc:
        raise ShardError(f"{where}: .{ext}: {exc.message}") from None
    return int(pixels.shape[2]), int(pixels.shape[1])
