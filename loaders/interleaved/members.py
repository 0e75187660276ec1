"""Where a sample's images and text are, and in which order.

A sample with several images stores one member per image, ``KEY.0.jpg``, ``KEY.1.png``, ... and
its order in ``KEY.json`` as two parallel lists (the OBELICS layout): ``"texts"`` (a str or
null at each position) and ``"images"`` (the member suffix, ``"0.jpg"``, or null), exactly one
of the two set at each position. Without those lists the numbered images come first, in their
order, then the text of ``KEY.txt`` (LLaVA's image-then-prompt); a sample with one image member
(``KEY.jpg``) is a sample of one image.
"""

from __future__ import annotations

import json
from typing import Any

from wdstool.base.errors import SampleError
from wdstool.format.images import IMAGE_ORDER, numbered_image
from wdstool.format.mapped import materialized

Segment = str | int  # text, or the index of one of the sample's images


def _text(value: Any) -> str:
    return bytes(materialized(value)).decode("utf-8", "replace")


def sample_segments(sample: Any, url: str) -> tuple[list[Segment], list[bytes]]:
    """(the sample's order of text and images, its images' bytes in image order)."""
    parts = sample.parts
    where = f"{url}: sample {sample.key!r}"
    order = None
    if "json" in parts:
        try:
            meta = json.loads(bytes(materialized(parts["json"])))
        except ValueError as exc:
            raise SampleError(f"{where}: .json is not JSON: {exc}") from None
        if isinstance(meta, dict) and "images" in meta and "texts" in meta:
            order = meta
    if order is not None:
        return _ordered(order, parts, where)
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


__all__ = ["Segment", "sample_segments"]
