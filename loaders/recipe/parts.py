"""What an adapter makes of a pipeline: its fusable head, its tail, and the image type."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from loaders.recipe.imagetypes import Kind


@dataclass(frozen=True)
class Split:
    """A pipeline's parts: ``head`` (None: nothing fusable leads; a v2 ``Head`` or a library's
    ``LibHead``), the ``tail`` ops in order (with the image-type conversions they need), the op
    that ended the fusable run where one did not fuse (its class name), the image type the
    pipeline was written for (``kind``: what an unfused pipeline is given, and what the head
    hands the tail) and the library that wrote it."""

    head: Any
    tail: tuple[Callable[[Any], Any], ...]
    stopped_by: str | None = None
    kind: Kind = Kind.TENSOR
    library: str = "torchvision v2"


def flatten(transform: Callable[[Any], Any], compose: type) -> Iterator[Callable[[Any], Any]]:
    """The ops of ``transform`` in order, nested ``compose`` pipelines (the library's
    ``Compose`` class) flattened."""
    if type(transform) is compose:
        for t in transform.transforms:  # type: ignore[attr-defined]
            yield from flatten(t, compose)
    else:
        yield transform


__all__ = ["Split", "flatten"]
