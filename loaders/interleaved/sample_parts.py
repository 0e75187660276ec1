"""Where a sample's images and text are, and in which order.

A sample with several images stores one member per image, ``KEY.0.jpg``, ``KEY.1.png``, ... and
its order in ``KEY.json`` as two parallel lists (the OBELICS layout): ``"texts"`` (a str or
null at each position) and ``"images"`` (the member suffix, ``"0.jpg"``, or null), exactly one
of the two set at each position; a conversation keeps ``"messages"`` instead
(:mod:`wdstool.format.conversation`), its contents in reading order being its segments. Without those lists the numbered images come first, in their
order, then the text of ``KEY.txt`` (LLaVA's image-then-prompt); a sample with one image member
(``KEY.jpg``) is a sample of one image.
"""

from __future__ import annotations

import json
from typing import Any

from wdstool.base.errors import SampleError
from wdstool.format.conversation import ConversationError, check_stored, image_parts, lists_of
from wdstool.format.images import IMAGE_ORDER, numbered_image
from wdstool.format.mapped import materialized

Segment = str | int  # text, or the index of one of the sample's images
IGNORE = -100  # a label out of the loss (the value PyTorch's and transformers' losses skip)


def _text(value: Any) -> str:
    return bytes(materialized(value)).decode("utf-8", "replace")


def _meta(sample: Any, where: str) -> dict[str, Any] | None:
    raw = sample.parts.get("json")
    if raw is None:
        return None
    try:
        meta = json.loads(bytes(materialized(raw)))
    except ValueError as exc:
        raise SampleError(f"{where}: .json is not JSON: {exc}") from None
    return meta if isinstance(meta, dict) else None


def sample_messages(sample: Any, url: str) -> tuple[list[dict[str, Any]], list[bytes]] | None:
    """A conversation's messages (``KEY.json``'s ``messages``) and its images' bytes in image
    order; None for a sample that is no conversation."""
    where = f"{url}: sample {sample.key!r}"
    meta = _meta(sample, where)
    if meta is None or "messages" not in meta:
        return None
    try:
        messages = check_stored(meta["messages"], ".json")
    except ConversationError as exc:
        raise SampleError(f"{where}: {exc}") from None
    images = []
    for part in image_parts(messages):
        name = part["image"]
        if name not in sample.parts:
            raise SampleError(f"{where}: .json names image member {name!r}, which it lacks")
        images.append(bytes(materialized(sample.parts[name])))
    return messages, images


def sample_segments(sample: Any, url: str) -> tuple[list[Segment], list[bytes]]:
    """(the sample's order of text and images, its images' bytes in image order); a
    conversation's are its contents in reading order (roles left out)."""
    parts = sample.parts
    where = f"{url}: sample {sample.key!r}"
    meta = _meta(sample, where)
    if meta is not None and "messages" in meta:
        try:
            texts, images = lists_of(check_stored(meta["messages"], ".json"))
        except ConversationError as exc:
            raise SampleError(f"{where}: {exc}") from None
        return _ordered({"texts": texts, "images": images}, parts, where)
    if meta is not None and "images" in meta and "texts" in meta:
        return _ordered(meta, parts, where)
    numbered = sorted((n, ext) for ext in parts if (n := numbered_image(ext)) is not None)
    if numbered:
        images = [bytes(materialized(parts[ext])) for _n, ext in numbered]
    else:
        ext = next((e for e in IMAGE_ORDER if e in parts), None)
        images = [] if ext is None else [bytes(materialized(parts[ext]))]
    segments: list[Segment] = list(range(len(images)))
    if "txt" in parts:
        segments.append(_text(parts["txt"]))
    if not segments:
        raise SampleError(f"{where}: has neither an image nor a text member")
    return segments, images


def _ordered(meta: dict[str, Any], parts: Any, where: str) -> tuple[list[Segment], list[bytes]]:
    texts, names = meta["texts"], meta["images"]
    if not (isinstance(texts, list) and isinstance(names, list) and len(texts) == len(names)):
        raise SampleError(f"{where}: .json's 'texts' and 'images' are not two lists of one length")
    segments: list[Segment] = []
    images: list[bytes] = []
    for i, (text, name) in enumerate(zip(texts, names, strict=True)):
        if (text is None) == (name is None):
            raise SampleError(
                f"{where}: .json position {i} has {'both' if text is not None else 'neither'} "
                "a text and an image"
            )
        if text is not None:
            segments.append(str(text))
            continue
        if name not in parts:
            raise SampleError(f"{where}: .json names image member {name!r}, which it lacks")
        segments.append(len(images))
        images.append(bytes(materialized(parts[name])))
    return segments, images


def sample_content(sample: Any, url: str, spec: Any) -> tuple[Any, list[bytes]]:
    """What a sample says, for ``spec`` (an ``Interleaved``): a conversation's messages where
    ``spec.chat`` renders them, else its segments; and its images' bytes in image order."""
    if spec.chat is not None:
        got = sample_messages(sample, url)
        if got is not None:
            return got
    return sample_segments(sample, url)


def segments_of(content: Any) -> list[Segment]:
    """Segments of a sample's content (a conversation's: its contents in reading order)."""
    if not content or not isinstance(content[0], dict):
        return list(content)
    texts, _ = lists_of(content)
    out: list[Segment] = []
    for t in texts:
        out.append(t if t is not None else sum(1 for s in out if isinstance(s, int)))
    return out


def without_images_from(content: Any, first: int) -> Any:
    """``content`` without its images from index ``first`` on (and their places)."""
    if not content or not isinstance(content[0], dict):
        return [s for s in content if not isinstance(s, int) or s < first]
    out, n = [], 0
    for m in content:
        parts = []
        for p in m["content"]:
            if p["type"] == "image":
                n += 1
                if n > first:
                    continue
            parts.append(p)
        out.append({"role": m["role"], "content": parts})
    return out


__all__ = [
    "IGNORE",
    "Segment",
    "sample_content",
    "sample_messages",
    "sample_segments",
    "segments_of",
    "without_images_from",
]
