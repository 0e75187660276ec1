"""The recipe object: a sample's encoded image in, the tensor the model sees out.

A :class:`Recipe` has the three parts of DESIGN.md's "Recipes": a geometric ``head`` whose
parameters are drawn from the image header and the sample's generator and which the decoder
executes (only the region is decoded, ``loaders.recipe.render``); a ``tail`` of ops run in the
worker on the small uint8 crop, seeded per sample (``loaders.recipe.seeding``); and the device
step, which stays the user's (``normalize``, MixUp/CutMix on the device batch). The built-in
train and eval recipes are two recipes (:func:`build_recipe` with ``transform=None``); any
torchvision v2 pipeline is split into the three (``loaders.recipe.fuse``); a pipeline that
does not start with a fusable op runs whole on the decoded image, seeded the same way.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from torchvision import transforms as T
from torchvision.transforms import v2

from loaders.recipe import kernels
from loaders.recipe.fuse import op_name, split
from loaders.recipe.geometry import Geometry, Head, Size, eval_head, train_head
from loaders.recipe.render import apply, render
from loaders.recipe.schedule import as_size
from loaders.recipe.seeding import Seeder, Where
from wdstool.base.errors import ConfigError
from wdstool.format.decode import PARTIAL_DECODE, decode_hwc, decode_rgb, header_size
from wdstool.format.images import MAX_PIXELS, is_jpeg

DEFAULT_SIZE = 224
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    """What turns one sample's image bytes into the model's tensor (see the module's docstring).

    ``head``: the fused geometric part (None: the image is decoded whole and ``tail`` runs on
    it); ``tail``: the ops run after it, in order; ``size``: the output (h, w) where every
    sample has the same (None: it depends on the image, or on an opaque callable); ``dtype``:
    the output's (uint8, or float32 for a pipeline that ends in ToDtype/Normalize);
    ``stopped_by``: the op that kept the pipeline from being fused; ``name``: "train"/"eval"
    for the built-in recipes."""

    head: Head | None
    tail: tuple[Callable[[Any], Any], ...] = ()
    size: Size | None = None
    dtype: torch.dtype = torch.uint8
    stopped_by: str | None = None
    name: str | None = None

    @property
    def fused(self) -> bool:
        return self.head is not None

    @property
    def opaque(self) -> bool:
        """The tail holds callables other than torchvision's transforms (a function, a
        ``Lambda``, another library's transform): they may draw from Python's or numpy's
        generators too, which are then seeded as well."""
        return any(_opaque(op) for op in self.tail)

    @cached_property
    def run_tail(self) -> Callable[[Any], Any] | None:
        """The tail as one callable (None: no tail)."""
        if not self.tail:
            return None
        return self.tail[0] if len(self.tail) == 1 else v2.Compose(list(self.tail))

    def draw(
        self,
        data: bytes,
        rng: random.Random,
        *,
        max_pixels: int = MAX_PIXELS,
        where: str = "",
    ) -> Geometry | None:
        """The sample's geometry from its header (None without a head)."""
        if self.head is None:
            return None
        width, height = header_size(data, max_pixels=max_pixels, where=where)
        return self.head.draw(height, width, rng)

    def __call__(
        self,
        data: bytes,
        rng: random.Random,
        seeder: Seeder,
        out: torch.Tensor | None = None,
        *,
        partial: bool = PARTIAL_DECODE,
        scaled: bool = True,
        max_pixels: int = MAX_PIXELS,
        where: str = "",
    ) -> torch.Tensor:
        """One sample: the head drawn from ``rng`` (a JPEG's from its header, and only its region
        decoded), written into ``out`` when given; then the tail, seeded from ``rng``. The
        result is ``out`` itself unless a tail made a new tensor."""
        head = self.head
        if head is None:
            img = decode_rgb(data, max_pixels=max_pixels, where=where)
        elif partial and is_jpeg(data):
            geometry = self.draw(data, rng, max_pixels=max_pixels, where=where)
            img = render(
                data, geometry, out, partial=True, scaled=scaled, max_pixels=max_pixels, where=where
            )
        else:  # channels-last: the resize kernels run ~3x faster on it
            img = decode_hwc(data, max_pixels=max_pixels, where=where)
            img = apply(img, head.draw(img.shape[-2], img.shape[-1], rng), out)
        return self.finish(img, rng, seeder)

    def finish(self, img: torch.Tensor, rng: random.Random, seeder: Seeder) -> torch.Tensor:
        """The tail on ``img`` (the head's output), seeded from ``rng``; ``img`` without one."""
        run = self.run_tail
        if run is None:
            return img
        kernels.install()  # bit-identical, faster uint8 sharpness/solarize (once)
        return seeder(run, img, rng.getrandbits(63))

    def at_size(self, size: Size, output: str = "uint8") -> Recipe:
        """The same recipe with its fused crop's output size replaced by ``size`` (an epoch of
        a size schedule); the tail is probed again for its output."""
        if self.name is not None:
            return build_recipe(None, train=self.name == "train", image_size=size)
        if self.head is None:
            raise ConfigError(
                f"a size schedule replaces the size of the recipe's fused crop, and this one has "
                f"none ({self.describe()}); start the pipeline with a crop, or use a fixed size"
            )
        try:
            head = self.head.with_size(size)
        except ValueError as exc:
            raise ConfigError(f"a size schedule: {exc}") from None
        return _probed(Recipe(head, self.tail, size, stopped_by=self.stopped_by), output)

    def describe(self) -> str:
        """One line: what the decoder does and what runs in the workers."""
        tail = ", ".join(op_name(op) for op in self.tail)
        if self.head is None:
            first = f"{self.stopped_by} comes first" if self.stopped_by else "no geometric op"
            return f"not fused ({first}): whole-image decode, then in the workers: {tail}"
        text = f"fused into the decoder: {self.head.describe()}"
        if self.name is not None:
            text = f"built-in {self.name} recipe, {text}"
        return text + (f"; then in the workers on the crop: {tail}" if tail else "")

    def __str__(self) -> str:
        return self.describe()


_CONTAINERS = (
    v2.Compose,
    v2.RandomApply,
    v2.RandomChoice,
    v2.RandomOrder,
    T.Compose,
    T.RandomApply,
    T.RandomChoice,
    T.RandomOrder,
)


def _opaque(op: Any) -> bool:
    """``op`` is not a torchvision transform (nor a container of only those)."""
    if isinstance(op, v2.Lambda | T.Lambda):
        return True
    if isinstance(op, _CONTAINERS):
        return any(_opaque(t) for t in op.transforms)
    return not (isinstance(op, torch.nn.Module) and type(op).__module__.startswith("torchvision."))


def _probe(recipe: Recipe) -> tuple[Size, torch.dtype]:
    """The tail's output size and dtype, from a run on a grey image of the head's size (where
    the ops fail on that image, the head's size and uint8: each sample is checked anyway)."""
    assert recipe.size is not None
    img = torch.full((3, *recipe.size), 128, dtype=torch.uint8)
    try:
        out = Seeder(Where.MAIN, recipe.opaque)(recipe.run_tail, img, 0)
    except Exception as exc:  # a real sample will say it, naming itself
        log.debug("transform: its ops failed on a grey test image: %s", exc)
        return recipe.size, torch.uint8
    check_output(out, "transform, on a grey test image", None)
    return (int(out.shape[-2]), int(out.shape[-1])), out.dtype


def check_output(img: Any, where: str, dtype: torch.dtype | None) -> None:
    """A transform's output must be a [3,H,W] uint8 (or, with ``dtype`` float32, float32)
    tensor: ConfigError naming ``where`` otherwise."""
    ok = isinstance(img, torch.Tensor) and img.ndim == 3 and img.shape[0] == 3
    allowed = (torch.uint8, torch.float32) if dtype is None else (dtype,)
    if ok and img.dtype in allowed:
        return
    got = (
        f"{img.dtype} {list(img.shape)}".replace("torch.", "")
        if isinstance(img, torch.Tensor)
        else type(img).__name__
    )
    want = " or ".join(str(d).replace("torch.", "") for d in allowed)
    raise ConfigError(
        f"{where}: the transform returned {got}; it must return a {want} [3,H,W] tensor"
        + (" (normalize on the device, or pass output='float')" if dtype == torch.uint8 else "")
    )


def build_recipe(
    transform: Callable[[Any], Any] | None,
    *,
    train: bool = True,
    image_size: int | tuple[int, int] | None = None,
    output: str = "uint8",
) -> Recipe:
    """The recipe ``make_loader`` runs: the built-in train or eval one (``transform=None``, at
    ``image_size``, default 224), or ``transform`` split for the decoder (ConfigError for a
    transform that is not callable, an ``image_size`` that contradicts its output size, or a
    float output where ``output="uint8"``)."""
    if transform is None:
        size = as_size(DEFAULT_SIZE if image_size is None else image_size)
        head = train_head(size) if train else eval_head(size)
        return Recipe(head, size=size, name="train" if train else "eval")
    if not callable(transform):
        raise ConfigError(
            f"transform={transform!r} is not callable: give a torchvision v2 pipeline or a "
            "function of a uint8 [3,H,W] tensor"
        )
    parts = split(transform)
    size = parts.head.size if parts.head is not None else None
    if image_size is not None and size is not None and as_size(image_size) != size:
        raise ConfigError(
            f"image_size={image_size!r} but the transform's {parts.head.describe()} "  # type: ignore[union-attr]
            f"outputs {size[0]}x{size[1]}; leave image_size out (the pipeline sets the size)"
        )
    return _probed(Recipe(parts.head, parts.tail, size, stopped_by=parts.stopped_by), output)


def _probed(recipe: Recipe, output: str) -> Recipe:
    """``recipe`` with the output size and dtype of its tail (a run on a test image)."""
    if recipe.size is None or not recipe.tail:
        return recipe
    out_size, dtype = _probe(recipe)
    if dtype != torch.uint8 and output == "uint8":
        raise ConfigError(
            f"transform: its output is {str(dtype).replace('torch.', '')} (ToDtype/Normalize "
            "in the pipeline) but output='uint8': end the pipeline at uint8 and normalize on "
            "the device (loaders.normalize), or pass output='float'"
        )
    return Recipe(recipe.head, recipe.tail, out_size, dtype, recipe.stopped_by)


__all__ = ["DEFAULT_SIZE", "Recipe", "as_size", "build_recipe", "check_output"]
