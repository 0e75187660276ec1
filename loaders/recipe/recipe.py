"""The recipe object: a sample's encoded image in, the tensor the model sees out.

A :class:`Recipe` has the three parts of DESIGN.md's "Recipes": a geometric ``head`` whose
parameters are drawn from the image header and the sample's generator and which the decoder
executes (only the region is decoded, ``loaders.recipe.region_decode``); a ``tail`` of ops run in the
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
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import torch
from torchvision.transforms import v2

from loaders.recipe import kernels
from loaders.recipe.adapters import split
from loaders.recipe.fuse import op_name
from loaders.recipe.geometry import Geometry, Head, Size, eval_head, train_head
from loaders.recipe.imagetypes import Kind, NormalizedFloat, as_kind, as_tensor
from loaders.recipe.libhead import LibHead
from loaders.recipe.probe import probe
from loaders.recipe.region_decode import apply, render
from loaders.recipe.schedule import as_size
from loaders.recipe.seeding import Seeder, draws_from_globals
from wdstool.base import counters
from wdstool.base.errors import ConfigError
from wdstool.format.decode import PARTIAL_DECODE, decode_hwc, decode_rgb, header_size
from wdstool.format.images import MAX_PIXELS, is_jpeg

DEFAULT_SIZE = 224
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    """What turns one sample's image bytes into the model's tensor (see the module's docstring).

    ``head``: the fused geometric part (None: the image is decoded whole and ``tail`` runs on
    it): a torchvision v2 :class:`Head` drawn from the sample's ``random.Random``, or another
    library's :class:`LibHead` drawn by that library's own functions from the seeded global
    generators; ``tail``: the ops run after it, in order; ``size``: the output (h, w) where
    every sample has the same (None: it depends on the image, or on an opaque callable);
    ``dtype``: the output's (uint8, or float32 for a pipeline that ends in
    ToTensor/ToDtype/Normalize; None: not known before a sample runs); ``stopped_by``: the op
    that kept the pipeline from being fused; ``name``: "train"/"eval" for the built-in
    recipes; ``kind``: the image type the pipeline was written for (what the tail, or an
    unfused pipeline, is given); ``library``: who wrote it."""

    head: Head | LibHead | Any
    tail: tuple[Callable[[Any], Any], ...] = ()
    size: Size | None = None
    dtype: torch.dtype | None = torch.uint8
    stopped_by: str | None = None
    name: str | None = None
    kind: Kind = Kind.TENSOR
    library: str = "torchvision v2"

    @property
    def fused(self) -> bool:
        return self.head is not None

    @property
    def opaque(self) -> bool:
        """The tail holds callables other than torchvision's transforms (a function, a
        ``Lambda``, another library's transform), or the head is drawn by another library:
        they may draw from Python's or numpy's generators too, which are then seeded as
        well."""
        return any(draws_from_globals(op) for op in self.tail) or (
            getattr(self.head, "seeded", False) and self.head.opaque  # type: ignore[union-attr]
        )

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
        if getattr(head, "seeded", False):  # another library's head: its own draws
            lib = (head, data, rng, seeder, out, partial, scaled, max_pixels, where)
            return self._library_sample(*lib)
        if out is not None and out.dtype != torch.uint8:
            out = None  # a v2 head writes uint8 pixels; the tail's float result is copied
        if head is None:
            img = as_kind(decode_rgb(data, max_pixels=max_pixels, where=where), self.kind)
        elif partial and is_jpeg(data):
            geometry = self.draw(data, rng, max_pixels=max_pixels, where=where)
            img = render(
                data, geometry, out, partial=True, scaled=scaled, max_pixels=max_pixels, where=where
            )
        else:  # channels-last: the resize kernels run ~3x faster on it
            img = decode_hwc(data, max_pixels=max_pixels, where=where)
            img = apply(img, head.draw(img.shape[-2], img.shape[-1], rng), out)
        return self.finish(img, rng, seeder)

    def finish(self, img: Any, rng: random.Random, seeder: Seeder) -> torch.Tensor:
        """The tail on ``img`` (the head's output), seeded from ``rng``; ``img`` without one."""
        run = self.run_tail
        if run is None:
            return as_tensor(img)
        kernels.install()  # bit-identical, faster uint8 sharpness/solarize (once)
        return as_tensor(counters.timed("tail", seeder, run, img, rng.getrandbits(63)))

    def _library_sample(
        self,
        head: Any,
        data: bytes,
        rng: random.Random,
        seeder: Seeder,
        out: torch.Tensor | None,
        partial: bool,
        scaled: bool,
        max_pixels: int,
        where: str,
    ) -> torch.Tensor:
        """A sample through another library's head: its draws (the library's own functions on
        the header's size), the decode of what they need, then the tail, all from one seed of
        the global generators, in the order the library's pipeline makes them. A float
        ``out`` (the batch's slot) takes the tail's ToTensor + Normalize straight away."""
        width, height = header_size(data, max_pixels=max_pixels, where=where)
        if self.tail:
            kernels.install()
        into = out if out is not None and out.dtype == torch.float32 else None

        def decode(g: Geometry) -> Any:
            return head.render(
                data, g, partial=partial, scaled=scaled, max_pixels=max_pixels, where=where
            )

        def tail(img: Any) -> torch.Tensor:
            return counters.timed("tail", run_tail, img)

        def run_tail(img: Any) -> torch.Tensor:
            for op in self.tail:
                img = (
                    op(img, into)
                    if isinstance(op, NormalizedFloat) and into is not None
                    else op(img)
                )
            return as_tensor(img)

        return seeder.staged(rng.getrandbits(63), lambda: head.draw(height, width), decode, tail)

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
        return _probed(replace(self, head=head, size=size), output)

    def describe(self) -> str:
        """One line: the library, what the decoder does and what runs in the workers."""
        tail = ", ".join(op_name(op) for op in self.tail)
        if self.head is None:
            first = f"{self.stopped_by} comes first" if self.stopped_by else "no geometric op"
            on = "" if self.kind is Kind.TENSOR else f" as {_KIND_WORDS[self.kind]}"
            return (
                f"{self.library} pipeline, not fused ({first}): whole-image decode, then in "
                f"the workers{on}: {tail}"
            )
        text = f"fused into the decoder: {self.head.describe()}"
        if self.name is not None:
            text = f"built-in {self.name} recipe, {text}"
        else:
            text = f"{self.library} pipeline, {text}"
        return text + (f"; then in the workers on the crop: {tail}" if tail else "")

    def __str__(self) -> str:
        return self.describe()


_KIND_WORDS = {Kind.PIL: "PIL images", Kind.NUMPY: "HWC arrays", Kind.TENSOR: "tensors"}


def build_recipe(
    transform: Callable[[Any], Any] | None,
    *,
    train: bool = True,
    image_size: int | tuple[int, int] | None = None,
    output: str = "auto",
) -> Recipe:
    """The recipe ``make_loader`` runs: the built-in train or eval one (``transform=None``, at
    ``image_size``, default 224), or ``transform`` split by its library's adapter
    (``loaders.recipe.adapters``). ConfigError for a transform that is not callable or holds a
    batch-level op, an ``image_size`` that contradicts its output size (fused or not), or a
    float output where ``output="uint8"`` (``"auto"``: whatever the pipeline gives)."""
    if transform is None:
        size = as_size(DEFAULT_SIZE if image_size is None else image_size)
        head = train_head(size) if train else eval_head(size)
        return Recipe(head, size=size, name="train" if train else "eval")
    if not callable(transform):
        raise ConfigError(
            f"transform={transform!r} is not callable: give a torchvision (v2 or v1), timm or "
            "albumentations pipeline, or a function of a uint8 [3,H,W] tensor"
        )
    parts = split(transform)
    recipe = _probed(
        Recipe(
            parts.head,
            parts.tail,
            parts.head.size if parts.head is not None else None,
            stopped_by=parts.stopped_by,
            kind=parts.kind,
            library=parts.library,
        ),
        output,
    )
    size = recipe.size
    if image_size is not None and size is not None and as_size(image_size) != size:
        what = recipe.head.describe() if recipe.head is not None else recipe.library
        raise ConfigError(
            f"image_size={image_size!r} but the transform ({what}) outputs {size[0]}x{size[1]}; "
            "leave image_size out (the pipeline sets the size)"
        )
    return recipe


def _probed(recipe: Recipe, output: str) -> Recipe:
    """``recipe`` with the output size and dtype its ops give (runs on test images)."""
    size, dtype = probe(recipe)
    if dtype is not None and dtype != torch.uint8 and output == "uint8":
        raise ConfigError(
            f"transform: its output is {str(dtype).replace('torch.', '')} (ToTensor/ToDtype/"
            "Normalize in the pipeline) but output='uint8': end the pipeline at uint8 and "
            "normalize on the device (loaders.normalize), or pass output='float' (the default, "
            "output='auto', follows the pipeline)"
        )
    return replace(recipe, size=size, dtype=dtype)


__all__ = ["DEFAULT_SIZE", "Recipe", "as_size", "build_recipe"]
