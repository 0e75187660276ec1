"""The kinds of output a loader makes, one module each behind :class:`OutputKind`
(``loaders.kinds.base``): ``image`` (``pixel_values``), ``views`` (multi-crop), ``clip``
(video clips), ``encoded`` (bytes + geometry for a device decoder).

Adding a kind: one module (its settings object, if it has one, rides in
``LoaderConfig.sample``), one line in :data:`KINDS`, its tests. The first kind whose
``applies(config)`` holds is the loader's.
"""

from __future__ import annotations

from loaders.config import LoaderConfig
from loaders.kinds.base import OutputKind
from loaders.kinds.clip import ClipKind
from loaders.kinds.encoded import EncodedKind
from loaders.kinds.image import ImageKind
from loaders.kinds.views import ViewsKind

KINDS: tuple[type[OutputKind], ...] = (EncodedKind, ClipKind, ViewsKind, ImageKind)


def kind_for(config: LoaderConfig) -> type[OutputKind]:
    """The kind of output a loader of ``config`` makes."""
    return next(k for k in KINDS if k.applies(config))


__all__ = ["KINDS", "OutputKind", "kind_for"]
