"""A geometric head drawn the way the library that wrote it draws, executed on the region only.

torchvision v1's and timm's crop/resize/flip ops draw their parameters from torch's global
generator (v1) or Python's ``random`` (timm), and compute their pixels with torchvision's v1
functional ops — on PIL images with PIL's resampling, on tensors with torch's. A
:class:`LibHead` keeps the pipeline's own op objects and, for each sample:

- **draws** by calling the op's own parameter function (``RandomResizedCrop.get_params``,
  timm's ``get_params`` and ``random.choice`` of interpolation, ``torch.rand(1) < p`` for a
  flip) on a stand-in of the image's size (a tensor on the ``meta`` device, which has a shape
  and no pixels): the same calls on the same generators, in the same order, as the pipeline
  makes on the whole image, so with the generators seeded per sample the draws — and every
  draw of the tail after them — are the pipeline's own;
- **renders** with the same functional ops (``F.resize``, ``F.crop``, ``F.center_crop``,
  ``F.hflip``) on the image type the pipeline was written for, after decoding only the region
  a crop-first op needs (a JPEG's region decodes to the pixels the whole decode has there):
  bit-exact with the pipeline on the whole decoded image. A resize-first op (``Resize`` +
  ``CenterCrop``) resizes the whole image as the library does; with ``scaled`` a JPEG more
  than twice the resized size is decoded at 1/2, 1/4 or 1/8 first (DCT scaling, as PIL's
  ``draft`` does).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

from loaders.recipe.geometry import Geometry, Size
from loaders.recipe.imagetypes import Kind, as_kind, as_tensor
from loaders.recipe.resample import pil_resize, support, windowed
from wdstool.format.decode import decode_crop, decode_hwc, scale_for
from wdstool.format.images import MAX_PIXELS, is_jpeg


def stand_in(height: int, width: int) -> torch.Tensor:
    """An image of ``height`` x ``width`` with no pixels, for an op's parameter function (which
    reads only the size, through ``F.get_dimensions``/``F.get_image_size``)."""
    return torch.empty((3, height, width), device="meta")


def mode(value: Any) -> str:
    """An interpolation (InterpolationMode, PIL's code, a name) as torchvision's name."""
    if isinstance(value, InterpolationMode):
        return value.value
    if isinstance(value, str):
        return InterpolationMode(value).value
    return F._interpolation_modes_from_int(int(value)).value


class LibOp(Protocol):
    """One fused geometric op of a library (a picklable object: recipes travel to worker
    processes): ``draw`` calls the op's own parameter function on the image's size; ``size``
    is its fixed output size (None: it depends on the image)."""

    size: Size | None

    def draw(self, height: int, width: int) -> Geometry: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class LibHead:
    """A library's leading geometric run: one :class:`LibOp`, then flips (``("h", op)``:
    a RandomHorizontalFlip, ``"v"`` vertical). ``kind``: whose pixels — PIL's (resampling of
    PIL images, computed on HWC arrays by ``loaders.recipe.resample``, bit for bit) or torch's
    (v1's ops on tensors); ``hands``: what the tail is given, a PIL image or a uint8 tensor (a
    tail whose ops all take tensors, as ``ToTensor`` + ``Normalize`` do through
    ``loaders.recipe.imagetypes``, skips the PIL image)."""

    op: LibOp
    flips: tuple[tuple[str, Any], ...] = ()
    kind: Kind = Kind.TENSOR
    library: str = "torchvision v1"
    hands: Kind = Kind.TENSOR

    seeded = True  # the draws come from the seeded global generators, inside the seeder

    @property
    def size(self) -> Size | None:
        return self.op.size

    def draw(self, height: int, width: int, rng: random.Random | None = None) -> Geometry:
        """The sample's geometry, from the global generators (``rng`` is not used: the seeder
        has seeded them)."""
        g = self.op.draw(height, width)
        hflip = vflip = False
        for kind, flip in self.flips:
            if torch.rand(1) < flip.p:  # RandomHorizontalFlip/RandomVerticalFlip.forward
                if kind == "h":
                    hflip = not hflip
                else:
                    vflip = not vflip
        return g._replace(hflip=hflip, vflip=vflip) if hflip or vflip else g

    @property
    def opaque(self) -> bool:
        """The draws use Python's ``random`` too (timm's), not only torch's (v1's)."""
        return self.library != "torchvision v1"

    def render(
        self,
        data: bytes,
        g: Geometry,
        *,
        partial: bool,
        scaled: bool,
        max_pixels: int = MAX_PIXELS,
        where: str = "",
    ) -> Any:
        """``g`` (drawn from ``data``'s header size) run on ``data``: a JPEG's region decoded
        alone for a crop-first geometry, else the whole image (see the module)."""
        jpeg = partial and is_jpeg(data)
        if jpeg and not g.pad and g.resized is None:
            scale = scale_for(g.height, g.width, g.size) if scaled else 1
            crop = decode_crop(data, g.top, g.left, g.height, g.width, scale=scale)
            if crop is not None:  # the region alone: crop nothing more, resize it
                return self._run(crop, g._replace(top=0, left=0, height=-1, width=-1))
        if jpeg and self._windowed(g, scaled):
            # Resize + CenterCrop in PIL's pixels: only what the crop's resize reads decoded,
            # only the crop resized
            t, left, h, w = support(g.source, g.resized, g.interpolation, _box(g))  # type: ignore[arg-type]
            crop = decode_crop(data, t, left, h, w)
            if crop is not None:
                part = crop.permute(1, 2, 0).numpy()
                return self._pil_pixels(part, g, (t, left, *g.source))
        if jpeg:
            return self._run(self._whole(data, g, scaled, max_pixels, where), g)
        return self._run(decode_hwc(data, max_pixels=max_pixels, where=where), g)

    def _whole(
        self, data: bytes, g: Geometry, scaled: bool, max_pixels: int, where: str
    ) -> torch.Tensor:
        """The whole image, decoded at a reduced scale where a resize-first geometry shrinks
        it more than twice (with ``scaled``)."""
        if scaled and g.resized is not None:
            h, w = g.source
            scale = scale_for(h, w, g.resized)
            if scale > 1:
                crop = decode_crop(data, 0, 0, h, w, scale=scale)
                if crop is not None:
                    return crop
        return decode_hwc(data, max_pixels=max_pixels, where=where)

    def apply(self, img: torch.Tensor, g: Geometry) -> Any:
        """``g`` run on a decoded uint8 [3,H,W] image (whole, or decoded at a reduced scale) as
        the library's ops run it; what the tail is given."""
        return self._run(img, g)

    def _run(self, img: torch.Tensor, g: Geometry) -> Any:
        """``g`` on ``img``: the resize (to ``g.resized`` first, or after the crop), the crop
        (``height`` -1: ``img`` is the region already), the flips."""
        if self.kind is Kind.PIL and not g.pad:
            return self._pil_pixels(img.permute(1, 2, 0).numpy(), g)
        x = as_kind(img, self.kind)
        if g.resized is not None:
            x = F.resize(x, list(g.resized), _interp(g), antialias=g.antialias)
        if g.pad:  # a CenterCrop larger than the image: F.center_crop pads it
            x = F.center_crop(x, list(g.size))
        else:
            if g.height >= 0:
                x = F.crop(x, g.top, g.left, g.height, g.width)
            if g.resized is None:
                x = F.resize(x, list(g.size), _interp(g), antialias=g.antialias)
        if g.hflip:
            x = F.hflip(x)
        if g.vflip:
            x = F.vflip(x)
        return self._hand(x)

    def _windowed(self, g: Geometry, scaled: bool) -> bool:
        """A resize-first geometry of PIL's pixels the compiled resampler computes from a part
        of the image (not where a scaled decode serves it better)."""
        if self.kind is not Kind.PIL or g.pad or g.resized is None:
            return False
        if scaled and scale_for(*g.source, g.resized) > 1:
            return False
        return windowed(g.interpolation)

    def _pil_pixels(self, arr: np.ndarray, g: Geometry, source: Any = None) -> Any:
        """PIL's crop/resize/flips (``F.crop``/``F.resize``/``F.hflip`` on a PIL image) on an
        HWC array: the same pixels (Pillow's resampling, ``loaders.recipe.resample``); a
        resize-first geometry resizes only its crop (``source``: ``arr`` is that part of the
        image, (top, left, height, width))."""
        if g.resized is not None:
            arr = pil_resize(arr, g.resized, g.interpolation, window=_box(g), source=source)
        else:
            if g.height >= 0:
                arr = arr[g.top : g.top + g.height, g.left : g.left + g.width]
            arr = pil_resize(arr, g.size, g.interpolation)
        if g.hflip:
            arr = arr[:, ::-1]
        if g.vflip:
            arr = arr[::-1]
        arr = np.ascontiguousarray(arr)
        if self.hands is Kind.PIL:
            return Image.fromarray(arr, "RGB")
        return torch.from_numpy(arr).permute(2, 0, 1)

    def _hand(self, x: Any) -> Any:
        """What the tail is given: ``x`` as ``hands``."""
        if self.hands is Kind.TENSOR and isinstance(x, Image.Image):
            return as_tensor(x)
        return x

    def with_size(self, size: Size) -> LibHead:
        raise ValueError(
            f"{self.library}'s {self.op.describe()} keeps its own size; build the pipeline per "
            "size with loaders.per_size(factory)"
        )

    def describe(self) -> str:
        names = {"h": "RandomHorizontalFlip", "v": "RandomVerticalFlip"}
        flips = [f"{names[k]}({op.p:g})" for k, op in self.flips]
        on = "PIL's pixels" if self.kind is Kind.PIL else "tensors"
        return " + ".join([self.op.describe(), *flips]) + f" ({self.library}, {on})"


def _box(g: Geometry) -> tuple[int, int, int, int]:
    return g.top, g.left, g.height, g.width


def _interp(g: Geometry) -> InterpolationMode:
    return InterpolationMode(g.interpolation)


__all__ = ["LibHead", "LibOp", "mode", "stand_in"]
