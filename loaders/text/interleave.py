"""A sample of text and images in one token sequence (OBELICS-style order): the layout of its
content, pure given the text's token ids.

``segments`` is the sample's order, each item a str (text) or an int (an image's index);
``image_tokens[i]`` is how many placeholder tokens image ``i`` takes. Text segments are
tokenized without special tokens, each image becomes a run of ``image_tokens[i]`` placeholder
ids, and the special tokens go around the whole (``TextTokenizer.encode_interleaved``).

A ``budget`` (``max_length`` less the special tokens) cuts the content: text is cut at the
budget, and an image's run is never cut in half: when it does not fit whole, the content ends
before it, and that image and every later one are dropped (``Encoded.images_dropped``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Encoded:
    """One interleaved sample: ``input_ids`` (int64 tensor [L], or a list), the images kept in
    the order they appear (``images``, their indices), each one's placeholder run as
    ``(start, length)`` in ``input_ids`` (``placeholders``, aligned with ``images``), how many
    of the sample's images the ``max_length`` cut dropped, and ``length`` (L)."""

    input_ids: Any
    images: tuple[int, ...]
    placeholders: tuple[tuple[int, int], ...]
    images_dropped: int
    length: int
    loss_mask: Any = None  # a conversation's: bool tensor [L] (loaders.text.chat); else None


@dataclass(frozen=True)
class Layout:
    """The content before special tokens: ids, kept images, runs (from 0), dropped images."""

    ids: list[int]
    images: tuple[int, ...]
    runs: tuple[tuple[int, int], ...]
    dropped: int


def check(segments: Sequence[Any], image_tokens: Sequence[int]) -> None:
    """ValueError (one line) unless every segment is a str or an image index in range, every
    image appears once, and every image takes a positive number of tokens."""
    if isinstance(segments, str | bytes) or not isinstance(segments, Sequence):
        raise ValueError(
            "segments must be a list of str (text) and int (image index), "
            f"not {type(segments).__name__}"
        )
    counts = list(image_tokens)
    bad = [n for n in counts if isinstance(n, bool) or not isinstance(n, int) or n < 1]
    if bad:
        raise ValueError(f"image_tokens must be positive ints, got {bad[0]!r}")
    seen: set[int] = set()
    for seg in segments:
        if isinstance(seg, str):
            continue
        if isinstance(seg, bool) or not isinstance(seg, int):
            raise ValueError(
                f"a segment is {type(seg).__name__}: each is a str (text) or an int (image index)"
            )
        if not 0 <= seg < len(counts):
            raise ValueError(f"segment image {seg} has no image_tokens entry ({len(counts)} given)")
        if seg in seen:
            raise ValueError(f"image {seg} appears twice in segments")
        seen.add(seg)
    if len(seen) != len(counts):
        missing = sorted(set(range(len(counts))) - seen)
        raise ValueError(f"images {missing} have image_tokens but no place in segments")


def lay_out(
    segments: Sequence[str | int],
    image_tokens: Sequence[int],
    text_ids: Callable[[str], list[int]],
    image_id: int,
    budget: int | None,
) -> Layout:
    """The content of one sample (``check`` it first), cut at ``budget`` tokens if given."""
    ids: list[int] = []
    images: list[int] = []
    runs: list[tuple[int, int]] = []
    for n, seg in enumerate(segments):
        room = None if budget is None else budget - len(ids)
        if isinstance(seg, str):
            piece = text_ids(seg)
            if room is not None and len(piece) > room:
                ids.extend(piece[:room])
                return Layout(ids, tuple(images), tuple(runs), _images_in(segments[n + 1 :]))
            ids.extend(piece)
            continue
        count = image_tokens[seg]
        if room is not None and count > room:
            return Layout(ids, tuple(images), tuple(runs), _images_in(segments[n:]))
        images.append(seg)
        runs.append((len(ids), count))
        ids.extend([image_id] * count)
    return Layout(ids, tuple(images), tuple(runs), 0)


def _images_in(segments: Sequence[str | int]) -> int:
    return sum(1 for s in segments if not isinstance(s, str))
