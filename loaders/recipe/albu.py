"""albumentations pipelines (``A.Compose``), run as albumentations runs them.

albumentations works on HWC uint8 arrays and draws from generators of its own: a
``random.Random`` and a numpy ``Generator`` that ``Compose.set_random_state`` hands to every
transform. The loader gives each sample its own pair, seeded from the sample's seed (through
the seeded global ``random``: :func:`sample_seed`), on a copy of the pipeline per thread, so a
sample's pixels depend on nothing else.

Fused: a ``Compose`` (p = 1, no bbox/keypoint processors) that starts with
``RandomResizedCrop`` or ``RandomSizedCrop`` (p = 1). Its parameters come from the transform's
own methods, called as ``BasicTransform.__call__`` calls them (``get_params``,
``update_transform_params``, ``get_params_dependent_on_data``) on a stand-in of the image's
size, after the draw ``Compose`` makes for its own probability; the region is decoded alone and
the transform's own ``apply`` crops nothing more and resizes it (OpenCV), and the rest of the
pipeline (flips, ``Normalize``, ``ToTensorV2``...) runs through each transform's own
``__call__``: the draws and the pixels of ``compose(image=whole)["image"]`` for the same
generators. Anything else runs whole on the decoded HWC array.
"""

from __future__ import annotations

import copy
import random
import threading
from typing import Any

import albumentations as A
import numpy as np

from loaders.recipe.geometry import Geometry, Size
from loaders.recipe.imagetypes import Kind, to_hwc
from loaders.recipe.parts import Split
from wdstool.format.decode import decode_crop, decode_hwc, scale_for
from wdstool.format.images import MAX_PIXELS, is_jpeg

ALBU = "albumentations"
_FUSABLE = (A.RandomResizedCrop, A.RandomSizedCrop)


def sample_seed() -> int:
    """The seed of this sample's albumentations generators, from the global ``random`` that
    the loader's seeder has seeded for the sample."""
    return random.getrandbits(64)


def seed_compose(compose: Any, seed: int) -> Any:
    """``compose`` with a fresh generator pair from ``seed`` handed to every transform."""
    compose.set_random_state(np.random.default_rng(seed), random.Random(seed))
    return compose


class _Pipeline:
    """The user's ``Compose``, one copy per thread (a copy holds the generators a sample draws
    from, from its first draw to its last); picklable for worker processes."""

    def __init__(self, compose: Any) -> None:
        self.compose = compose
        self._local = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        return {"compose": self.compose}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["compose"])  # type: ignore[misc]

    def mine(self) -> Any:
        own = getattr(self._local, "compose", None)
        if own is None:
            own = self._local.compose = copy.deepcopy(self.compose)
        return own


class WholePipeline:
    """An unfused ``Compose`` on a sample's whole HWC array, its generators seeded."""

    def __init__(self, pipeline: _Pipeline) -> None:
        self.pipeline = pipeline

    def __call__(self, img: np.ndarray) -> Any:
        compose = seed_compose(self.pipeline.mine(), sample_seed())
        return compose(image=img)["image"]

    @property
    def label(self) -> str:
        names = ", ".join(type(t).__name__ for t in self.pipeline.compose.transforms)
        return f"A.Compose([{names}])"

    def __repr__(self) -> str:
        return self.label


class Rest:
    """The transforms after the fused head, each through its own ``__call__``, on the
    generators the head drew from."""

    def __init__(self, pipeline: _Pipeline, start: int) -> None:
        self.pipeline, self.start = pipeline, start

    def __call__(self, img: np.ndarray) -> Any:
        data = {"image": img}
        for t in self.pipeline.mine().transforms[self.start :]:
            data = t(**data)
        return data["image"]

    @property
    def label(self) -> str:
        return ", ".join(type(t).__name__ for t in self.pipeline.compose.transforms[self.start :])

    def __repr__(self) -> str:
        return self.label


class AlbuHead:
    """A ``Compose``'s leading ``RandomResizedCrop``/``RandomSizedCrop``, drawn by the
    transform's own methods and executed on the decoded region (see the module)."""

    seeded = True
    opaque = True
    kind = hands = Kind.NUMPY
    library = ALBU

    def __init__(self, pipeline: _Pipeline) -> None:
        self.pipeline = pipeline

    @property
    def op(self) -> Any:
        return self.pipeline.mine().transforms[0]

    @property
    def size(self) -> Size:
        h, w = self.pipeline.compose.transforms[0].size
        return int(h), int(w)

    def draw(self, height: int, width: int, rng: Any = None) -> Geometry:
        compose = seed_compose(self.pipeline.mine(), sample_seed())
        compose.py_random.random()  # Compose.__call__'s draw for its own p (1: always runs)
        t = compose.transforms[0]
        data = {"image": np.broadcast_to(np.zeros((), np.uint8), (height, width, 3))}
        params = t.update_transform_params(t.get_params(), data)  # p = 1: should_apply draws none
        params.update(t.get_params_dependent_on_data(params, data))
        x1, y1, x2, y2 = params["crop_coords"]
        return Geometry((height, width), y1, x1, y2 - y1, x2 - x1, self.size, "opencv")

    def render(
        self,
        data: bytes,
        g: Geometry,
        *,
        partial: bool,
        scaled: bool,
        max_pixels: int = MAX_PIXELS,
        where: str = "",
    ) -> np.ndarray:
        """The transform's ``apply`` on the decoded region (only the region of a JPEG)."""
        crop = None
        if partial and is_jpeg(data):
            scale = scale_for(g.height, g.width, g.size) if scaled else 1
            crop = decode_crop(data, g.top, g.left, g.height, g.width, scale=scale)
        if crop is None:
            whole = decode_hwc(data, max_pixels=max_pixels, where=where)
            crop = whole[:, g.top : g.top + g.height, g.left : g.left + g.width]
        region = to_hwc(crop)
        h, w = region.shape[:2]
        return self.op.apply(region, crop_coords=(0, 0, w, h))

    def with_size(self, size: Size) -> AlbuHead:
        raise ValueError(
            "an albumentations crop keeps its own size; build the pipeline per size with "
            "loaders.per_size(factory)"
        )

    def describe(self) -> str:
        t = self.pipeline.compose.transforms[0]
        return f"{type(t).__name__}({self.size[0]}x{self.size[1]}) (albumentations, on HWC arrays)"


def _fusable(compose: Any) -> bool:
    ts = compose.transforms
    return (
        type(compose) is A.Compose
        and compose.p >= 1.0
        and not compose.processors
        and len(ts) > 0
        and type(ts[0]) in _FUSABLE
        and ts[0].p >= 1.0
    )


def split(transform: Any) -> Split:
    """An ``A.Compose`` cut into its fused crop and the rest, or run whole (see the module)."""
    pipeline = _Pipeline(transform)
    if not isinstance(transform, A.Compose):
        raise_not_compose(transform)
    if not _fusable(transform):
        first = transform.transforms[0] if len(transform.transforms) else None
        stopped = type(first).__name__ if first is not None else None
        return Split(None, (WholePipeline(pipeline),), stopped, kind=Kind.NUMPY, library=ALBU)
    return Split(AlbuHead(pipeline), (Rest(pipeline, 1),), kind=Kind.NUMPY, library=ALBU)


def raise_not_compose(transform: Any) -> None:
    from wdstool.base.errors import ConfigError

    raise ConfigError(
        f"transform: an albumentations {type(transform).__name__} takes image=...; wrap it in "
        "A.Compose([...]) (with A.ToTensorV2() last, or not: HWC arrays are converted)"
    )


__all__ = ["ALBU", "AlbuHead", "sample_seed", "seed_compose", "split"]
