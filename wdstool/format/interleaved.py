"""Samples of several images and texts (vision-language documents): the members, ``KEY.json``'s
two lists, and the facts the manifest keeps about them.

A sample with several images stores one member per image, ``KEY.0.jpg``, ``KEY.1.png``, ...:
the number is the image's index in the sample (0, 1, ... in reading order), the extension its
format as its bytes say. Its text is in ``KEY.json``, in the OBELICS layout::

    {"texts": ["A cat.", null, "And a dog:", null], "images": [null, "0.jpg", null, "1.png"], ...}

two lists of one length, read in parallel: at each position exactly one of them is not null,
a text (a string) or an image, named by its member's suffix (``"0.jpg"`` is ``KEY.0.jpg``);
the images appear in index order, each once. The rest of ``KEY.json`` is the sample's other
fields (a listing row's other columns, ``paths``: the source of each image, a label's
``class_index``/``class``). A label is ``KEY.cls`` as in any sample. It is plain WebDataset:
upstream ``webdataset`` groups ``KEY.0.jpg``, ``KEY.1.png`` and ``KEY.json`` into one sample
whose keys are ``"0.jpg"``, ``"1.png"`` and ``"json"``.

The manifest (:mod:`wdstool.format.manifest`) keeps, per shard, what a reader needs to plan
batches by images and text length without opening a shard (:class:`InterleavedShard`)::

    "interleaved": {"images": [2, 1], "sizes": [[640, 480], [320, 200], [800, 600]],
                    "chars": [118, 40]}

``images``: each sample's image count, in the shard's sample order; ``sizes``: every image's
``[width, height]``, sample after sample, each sample's in index order (``sum(images)`` pairs);
``chars``: each sample's text length in characters (code points, every text of the sample).
Each list is written on one line. At the top of the manifest, ``"interleaved": {"samples",
"images", "chars"}`` totals them over the shards that have them. A data set without such
samples has neither (its manifest is what it always was).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from wdstool.base.errors import ShardError
from wdstool.format.conversation import check_stored, lists_of
from wdstool.format.images import IMAGE_EXTENSIONS

_MEMBER = re.compile(r"(0|[1-9][0-9]*)\.([a-z0-9]+)")


def image_member(index: int, ext: str) -> str:
    """The member suffix of a sample's image ``index`` in format ``ext``: ``"0.jpg"``."""
    return f"{index}.{ext}"


def member_index(ext: str) -> int | None:
    """The image index a member suffix names (``"1.png"`` -> 1), None for any other member."""
    m = _MEMBER.fullmatch(ext)
    if m is None or m.group(2) not in IMAGE_EXTENSIONS:
        return None
    return int(m.group(1))


def is_interleaved(exts: Iterable[str]) -> bool:
    """Whether a sample with these member suffixes holds numbered images (``KEY.0.jpg``)."""
    return any(member_index(e) is not None for e in exts)


def image_members(exts: Iterable[str]) -> list[str]:
    """A sample's numbered image members, in index order."""
    found = [(i, e) for e in exts if (i := member_index(e)) is not None]
    return [e for _, e in sorted(found)]


def text_of(texts: Sequence[str | None], images: Sequence[str | None], mark: str = "") -> str:
    """A sample's text in reading order, each image as ``mark`` (``""``: left out)."""
    return "".join(t if t is not None else mark for t, i in zip(texts, images, strict=True))


def sample_lists(meta: bytes, exts: Iterable[str]) -> tuple[list[str | None], list[str | None]]:
    """(texts, images) of a sample from its ``KEY.json`` bytes, checked against its member
    suffixes ``exts``; ValueError with the reason (one line) when they disagree: a list
    missing or not a list, lists of two lengths, a position with both or neither, an image
    named twice or out of index order, one without its member, a numbered image member the
    lists do not name."""
    try:
        obj = json.loads(meta)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f".json does not parse: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(".json is not an object")
    texts, images = json_lists(obj)
    if not isinstance(texts, list) or not isinstance(images, list):
        raise ValueError('.json has no "texts" and "images" lists, nor "messages"')
    if len(texts) != len(images):
        raise ValueError(f'.json "texts" has {len(texts)} entries, "images" {len(images)}')
    members = set(image_members(exts))
    named: list[str] = []
    for n, (t, i) in enumerate(zip(texts, images, strict=True)):
        if (t is None) == (i is None):
            what = "both a text and an image" if t is not None else "neither a text nor an image"
            raise ValueError(f".json position {n} holds {what}")
        if t is not None and not isinstance(t, str):
            raise ValueError(f'.json "texts"[{n}] is not a string')
        if i is None:
            continue
        if not isinstance(i, str) or member_index(i) != len(named):
            raise ValueError(
                f'.json "images"[{n}] is {i!r}, expected image {len(named)} ("{len(named)}.jpg", ...)'
            )
        if i not in members:
            raise ValueError(f'.json "images"[{n}] names member .{i}, which the sample lacks')
        named.append(i)
    extra = sorted(members - set(named), key=lambda e: member_index(e) or 0)
    if extra:
        raise ValueError(f'member .{extra[0]} is not named in the .json\'s "images"')
    return texts, images


def json_lists(obj: dict[str, Any]) -> tuple[Any, Any]:
    """A sample's ``texts`` and ``images`` lists as its ``KEY.json`` holds them, or as its
    conversation's ``messages`` give them (:func:`wdstool.format.conversation.lists_of`);
    ``(None, None)`` where it has neither. A malformed conversation is a ValueError."""
    if "messages" in obj:
        return lists_of(check_stored(obj["messages"], ".json"))
    return obj.get("texts"), obj.get("images")


def is_document(parts: Mapping[str, Any]) -> bool:
    """Whether a sample's members (suffix -> bytes) hold a document or a conversation: numbered
    images, or a ``KEY.json`` with its lists (a conversation may have no image)."""
    if is_interleaved(parts):
        return True
    meta = parts.get("json")
    if meta is None:
        return False
    try:
        return has_lists(json.loads(bytes(meta)))
    except (ValueError, UnicodeDecodeError):
        return False


def has_lists(obj: Any) -> bool:
    """Whether a decoded ``KEY.json`` describes a sample of several images and texts (or a
    conversation), which may hold no image at all."""
    return isinstance(obj, dict) and ("messages" in obj or ("texts" in obj and "images" in obj))


class InterleavedShard(NamedTuple):
    """One shard's facts: per sample its image count and text length in characters, and
    every image's (width, height) in sample order."""

    images: tuple[int, ...]
    sizes: tuple[tuple[int, int], ...]
    chars: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "images": list(self.images),
            "sizes": [list(s) for s in self.sizes],
            "chars": list(self.chars),
        }

    def sample_sizes(self) -> list[list[tuple[int, int]]]:
        """The sizes of each sample's images."""
        out, at = [], 0
        for n in self.images:
            out.append(list(self.sizes[at : at + n]))
            at += n
        return out

    @classmethod
    def from_json(cls, raw: Any, nsamples: int, where: str) -> InterleavedShard:
        """A shard entry's ``interleaved`` (``nsamples``: the entry's), checked."""

        def ints(v: Any) -> bool:
            return isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)

        images = raw.get("images") if isinstance(raw, dict) else None
        sizes = raw.get("sizes") if isinstance(raw, dict) else None
        chars = raw.get("chars") if isinstance(raw, dict) else None
        if (
            not ints(images)
            or not ints(chars)
            or len(images) != nsamples
            or len(chars) != nsamples
            or not isinstance(sizes, list)
            or len(sizes) != sum(images)
            or not all(isinstance(s, list) and len(s) == 2 and ints(s) for s in sizes)
        ):
            raise ShardError(
                f"{where}: malformed manifest: 'interleaved' must hold 'images' and 'chars' "
                f"({nsamples} ints each) and 'sizes' ([width, height] per image)"
            )
        return cls(tuple(images), tuple((w, h) for w, h in sizes), tuple(chars))


class InterleavedTotals(NamedTuple):
    """The manifest's top ``interleaved``: samples, images and text characters in all."""

    samples: int = 0
    images: int = 0
    chars: int = 0

    def to_json(self) -> dict[str, int]:
        return {"samples": self.samples, "images": self.images, "chars": self.chars}


def totals(shards: Iterable[InterleavedShard | None]) -> InterleavedTotals | None:
    """The totals over the shards that have facts, None when none has."""
    got = [s for s in shards if s is not None]
    if not got:
        return None
    return InterleavedTotals(
        sum(len(s.images) for s in got),
        sum(sum(s.images) for s in got),
        sum(sum(s.chars) for s in got),
    )


def per_sample(shards: Iterable[InterleavedShard | None]) -> dict[str, float | int]:
    """Images per sample over the shards that have facts: min, mean and max (0s when none)."""
    counts = [n for s in shards if s is not None for n in s.images]
    if not counts:
        return {"min": 0, "mean": 0.0, "max": 0}
    return {"min": min(counts), "mean": round(sum(counts) / len(counts), 3), "max": max(counts)}


def compact_lists(text: str, values: Mapping[str, Any]) -> str:
    """``text`` (JSON written with an indent) with each placeholder string of ``values`` (its
    key, quoted) replaced by its value written on one line: the per-sample lists of a large
    shard would otherwise take a line per number."""
    for token, value in values.items():
        text = text.replace(json.dumps(token), json.dumps(value, separators=(",", ":")), 1)
    return text
