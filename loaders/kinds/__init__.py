"""The kinds of output a loader makes, one module each behind :class:`OutputKind`
(``loaders.kinds.base``): ``image`` (``pixel_values``), ``views`` (multi-crop), ``clip``
(video clips), ``interleaved`` (several images and text a sample), ``packed`` (interleaved samples packed to
a token budget), ``encoded`` (bytes +
geometry for a device decoder).

Adding a kind: one module, one line in :data:`KINDS`, its tests. A kind with settings of its
own has one settings object (``OutputKind.settings``: :class:`loaders.Clips` is the clip
kind's), which users give as ``make_loader(src, output=Settings(...))`` (``clips=`` is the
clip kind's own spelling) and which rides in ``LoaderConfig.sample``: no new keyword per kind.
The first kind whose ``applies(config)`` holds is the loader's.
"""

from __future__ import annotations

from typing import Any

from loaders.config import LoaderConfig
from loaders.kinds.base import OutputKind
from loaders.kinds.clip import ClipKind
from loaders.kinds.encoded import EncodedKind
from loaders.kinds.image import ImageKind
from loaders.kinds.interleaved import InterleavedKind
from loaders.kinds.packed import PackedKind
from loaders.kinds.views import ViewsKind
from wdstool.base.errors import ConfigError

KINDS: tuple[type[OutputKind], ...] = (
    EncodedKind,
    ClipKind,
    PackedKind,
    InterleavedKind,
    ViewsKind,
    ImageKind,
)


def kind_for(config: LoaderConfig) -> type[OutputKind]:
    """The kind of output a loader of ``config`` makes."""
    return next(k for k in KINDS if k.applies(config))


def kind_arguments(
    output: Any, clips: Any, *, views: Any, channels_last: bool, repeats: int
) -> tuple[Any, str, int]:
    """``make_loader``'s ``output`` (a word, or a kind's settings object) and ``clips``: the
    kind's settings (None: none), the output and the repeats they settle."""
    sample, kind = clips, ClipKind if clips is not None else None
    if not isinstance(output, str):
        if clips is not None:
            raise ConfigError("give clips= or output=Clips(...), not both")
        sample, output = output, "auto"
        kind = next((k for k in KINDS if k.settings and isinstance(sample, k.settings)), None)
        if kind is None:
            known = ", ".join(f"loaders.{k.settings.__name__}" for k in KINDS if k.settings)
            raise ConfigError(
                f"output={sample!r}: give 'auto', 'uint8', 'float', 'encoded' or the settings "
                f"of a kind of output ({known})"
            )
    if kind is None:
        return None, output, repeats
    output, repeats = kind.arguments(
        sample, views=views, output=output, channels_last=channels_last, repeats=repeats
    )
    return sample, output, repeats


__all__ = ["KINDS", "OutputKind", "kind_arguments", "kind_for"]
