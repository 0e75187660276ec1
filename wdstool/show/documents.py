"""A sample of several images and texts (``KEY.0.jpg``, ``KEY.1.png``, ..., ``KEY.json``:
:mod:`wdstool.format.interleaved`) as the report shows it: its images side by side in one
strip, its text beside them with ``[image N]`` where each image stands."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wdstool.format.interleaved import image_members, sample_lists
from wdstool.show.facts import image_facts

STRIP_IMAGES = 6  # images drawn in a strip at most (the text names them all)
GAP = 4  # pixels between two images of a strip
BACKGROUND = 250


@dataclass(frozen=True, kw_only=True)
class DocFacts:
    """What a sample of several images says: its images (member, width, height), its text in
    reading order with ``[image N]`` marks, its length in characters; ``problem``: why its
    ``.json`` lists do not read (then no text)."""

    members: tuple[str, ...]
    sizes: tuple[tuple[int | None, int | None], ...]
    text: str
    chars: int
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "images": len(self.members),
            "members": list(self.members),
            "sizes": [list(s) for s in self.sizes],
            "chars": self.chars,
            "text": self.text,
        }

    def line(self) -> str:
        """Its images and text length, as a tile shows them."""
        sizes = ", ".join(f"{w}×{h}" if w else "size unknown" for w, h in self.sizes[:4])
        more = f" +{len(self.sizes) - 4}" if len(self.sizes) > 4 else ""
        return f"{len(self.members)} images ({sizes}{more}), {self.chars:,} characters of text"


def doc_facts(parts: Mapping[str, bytes]) -> DocFacts:
    """The facts of a sample of several images from its members (read whole)."""
    members = tuple(image_members(parts))
    sizes = tuple(
        (f.width, f.height) for f in (image_facts(e, parts[e], len(parts[e])) for e in members)
    )
    try:
        texts, _ = sample_lists(bytes(parts.get("json", b"")), parts)
    except ValueError as exc:
        return DocFacts(members=members, sizes=sizes, text="", chars=0, problem=str(exc))
    marks = iter(f"[image {n}]" for n in range(len(members)))
    text = "".join(t if t is not None else next(marks) for t in texts)
    chars = sum(len(t) for t in texts if t is not None)
    return DocFacts(members=members, sizes=sizes, text=text, chars=chars)


def doc_strip(parts: Mapping[str, bytes], where: str) -> Any:
    """Its first ``STRIP_IMAGES`` images as thumbnails side by side (one height), uint8 H x W x
    3; SampleError (naming ``where`` and the member) when one does not decode."""
    import numpy as np

    from wdstool.show.sheet import THUMB, thumbnail

    thumbs = [
        thumbnail(parts[e], where=f"{where}: .{e}", longest=THUMB // 2)
        for e in image_members(parts)[:STRIP_IMAGES]
    ]
    height = max(t.shape[0] for t in thumbs)
    pieces = []
    for n, t in enumerate(thumbs):
        if n:
            pieces.append(np.full((height, GAP, 3), BACKGROUND, np.uint8))
        pad = np.full((height - t.shape[0], t.shape[1], 3), BACKGROUND, np.uint8)
        pieces.append(np.concatenate([t, pad]))
    return np.ascontiguousarray(np.concatenate(pieces, axis=1))
