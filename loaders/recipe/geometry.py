"""The geometric head of a recipe: its parameters drawn from the image size and a generator.

A head is what torchvision's v2 crop/resize/flip ops do, reduced to numbers: which region of
the source image becomes the output, at what output size, with which interpolation, and which
flips. Its draws come from an explicit ``random.Random`` and follow torchvision's algorithms
(``RandomResizedCrop.make_params``' ten tries and central fallback, ``RandomCrop``'s offsets,
``CenterCrop``'s rounding, ``Resize``'s output size, ``RandomChoice``'s weights, a flip's
probability), so the parameters have torchvision's distributions while a sample's parameters
depend only on its seed. Drawing needs the image's size only — the header of a JPEG is enough —
so the decoder can decode just the region (``loaders.recipe.region_decode``).

Pure Python: no torch here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

Size = tuple[int, int]  # (height, width)


class Geometry(NamedTuple):
    """One sample's geometric parameters, for a source image of ``source`` (h, w) pixels.

    ``resized`` is None: the region ``(top, left, height, width)`` of the source (whole pixels)
    is cropped and resized to ``size`` (RandomResizedCrop, CenterCrop, RandomCrop). Otherwise the
    whole source is first resized to ``resized`` (h, w) and the region, in pixels of that resized
    image, is cropped out of it, so ``size`` is the region's size (Resize, + CenterCrop or
    RandomCrop). ``pad``: the region reaches outside the image (a CenterCrop larger than it),
    which torchvision fills with zeros. The flips come last, horizontal first."""

    source: Size
    top: int
    left: int
    height: int
    width: int
    size: Size
    interpolation: str  # torchvision's InterpolationMode value: "bilinear", "bicubic", ...
    antialias: bool = True
    resized: Size | None = None
    hflip: bool = False
    vflip: bool = False
    pad: bool = False

    def source_box(self) -> tuple[float, float, float, float]:
        """(top, left, height, width) of the region in source pixels: for a resize-first
        geometry the crop mapped back through the resize (fractional)."""
        if self.resized is None:
            return self.top, self.left, self.height, self.width
        fy, fx = self.source[0] / self.resized[0], self.source[1] / self.resized[1]
        return self.top * fy, self.left * fx, self.height * fy, self.width * fx


def random_resized_crop_params(
    height: int,
    width: int,
    rng: random.Random,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
) -> tuple[int, int, int, int]:
    """(top, left, h, w): torchvision's ``RandomResizedCrop.make_params``, driven by ``rng``."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = round(w / min(ratio))
    elif in_ratio > max(ratio):
        h = height
        w = round(h * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def resized_size(
    height: int, width: int, size: Sequence[int] | None, max_size: int | None = None
) -> Size:
    """torchvision's ``Resize`` output size: ``size`` [s] sets the shorter side (the longer one
    scaled and truncated, capped by ``max_size``), [h, w] both, None only ``max_size`` (the
    longer side)."""
    short, long = (width, height) if width <= height else (height, width)
    if size is None:
        if not isinstance(max_size, int):
            raise ValueError(f"max_size must be an integer when size is None, got {max_size}")
        new_short, new_long = int(max_size * short / long), max_size
    elif len(size) == 1:
        new_short, new_long = size[0], int(size[0] * long / short)
        if max_size is not None and new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    else:
        return int(size[0]), int(size[1])
    return (new_long, new_short) if width <= height else (new_short, new_long)


def center_offset(outer: int, inner: int) -> int:
    """torchvision's CenterCrop anchor: int(round(...)) with Python's round (halves to even)."""
    return round((outer - inner) / 2.0)


def _fmt(size: Sequence[int] | None) -> str:
    if size is None:
        return "None"
    return str(size[0]) if len(size) == 1 or size[0] == size[1] else f"({size[0]}, {size[1]})"


@dataclass(frozen=True)
class RandomResizedCropHead:
    """``v2.RandomResizedCrop``: a random region of random scale and aspect, resized."""

    size: Size
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    interpolation: str = "bilinear"
    antialias: bool = True

    def draw(self, height: int, width: int, rng: random.Random) -> Geometry:
        top, left, h, w = random_resized_crop_params(height, width, rng, self.scale, self.ratio)
        return Geometry(
            (height, width), top, left, h, w, self.size, self.interpolation, self.antialias
        )

    def with_size(self, size: Size) -> RandomResizedCropHead:
        return replace(self, size=size)

    def describe(self) -> str:
        extra = "" if self.scale == (0.08, 1.0) else f", scale={self.scale}"
        if self.ratio != (3 / 4, 4 / 3):
            extra += f", ratio=({self.ratio[0]:.3g}, {self.ratio[1]:.3g})"
        return f"RandomResizedCrop({_fmt(self.size)}{extra}, {self.interpolation})"


@dataclass(frozen=True)
class CropHead:
    """``v2.CenterCrop`` (``random=False``) or ``v2.RandomCrop`` without padding: a region of
    the source at its own size."""

    size: Size
    random: bool = False

    def draw(self, height: int, width: int, rng: random.Random) -> Geometry:
        ch, cw = self.size
        if self.random:
            if ch > height or cw > width:
                raise ValueError(
                    f"RandomCrop({_fmt(self.size)}) is larger than the {height}x{width} image"
                )
            top, left = rng.randint(0, height - ch), rng.randint(0, width - cw)
            return Geometry((height, width), top, left, ch, cw, self.size, "bilinear")
        pad = ch > height or cw > width
        top = 0 if pad else center_offset(height, ch)
        left = 0 if pad else center_offset(width, cw)
        return Geometry((height, width), top, left, ch, cw, self.size, "bilinear", pad=pad)

    def with_size(self, size: Size) -> CropHead:
        return replace(self, size=size)

    def describe(self) -> str:
        return f"{'RandomCrop' if self.random else 'CenterCrop'}({_fmt(self.size)})"


@dataclass(frozen=True)
class ResizeHead:
    """``v2.Resize`` of the whole image, optionally followed by ``v2.CenterCrop`` (the eval
    recipe: ``Resize(int(S / crop_pct)) + CenterCrop(S)``) or ``v2.RandomCrop`` without
    padding."""

    resize: tuple[int, ...] | None  # (s,): shorter side; (h, w); None: max_size only
    max_size: int | None = None
    interpolation: str = "bilinear"
    antialias: bool = True
    crop: Size | None = None
    random_crop: bool = False

    @property
    def size(self) -> Size | None:
        """The output size, where it does not depend on the image's."""
        if self.crop is not None:
            return self.crop
        return (self.resize[0], self.resize[1]) if self.resize and len(self.resize) == 2 else None

    def draw(self, height: int, width: int, rng: random.Random) -> Geometry:
        rh, rw = resized_size(height, width, self.resize, self.max_size)
        ch, cw = (rh, rw) if self.crop is None else self.crop
        pad = False
        if self.random_crop:
            if ch > rh or cw > rw:
                raise ValueError(
                    f"RandomCrop({_fmt(self.crop)}) is larger than the image resized to {rh}x{rw}"
                )
            top, left = rng.randint(0, rh - ch), rng.randint(0, rw - cw)
        else:
            pad = ch > rh or cw > rw
            top, left = (0, 0) if pad else (center_offset(rh, ch), center_offset(rw, cw))
        return Geometry(
            (height, width),
            top,
            left,
            ch,
            cw,
            (ch, cw),
            self.interpolation,
            self.antialias,
            resized=(rh, rw),
            pad=pad,
        )

    def with_size(self, size: Size) -> ResizeHead:
        """The same recipe at another output size: the crop becomes ``size`` and the resize
        keeps its ratio to the crop (``crop_pct``)."""
        if self.crop is None:
            if self.resize is None or len(self.resize) != 2:
                raise ValueError(
                    f"{self.describe()} has no fixed output size to replace; add a CenterCrop"
                )
            return replace(self, resize=size)
        ch, cw = self.crop
        if self.resize is not None and len(self.resize) == 2:
            resize: tuple[int, ...] | None = (
                int(self.resize[0] * size[0] / ch),
                int(self.resize[1] * size[1] / cw),
            )
        elif self.resize is not None:
            resize = (int(self.resize[0] * min(size) / min(ch, cw)),)
        else:
            resize = None
        return replace(self, resize=resize, crop=size)

    def describe(self) -> str:
        text = f"Resize({_fmt(self.resize)}, {self.interpolation}"
        text += f", max_size={self.max_size})" if self.max_size is not None else ")"
        if self.crop is not None:
            text += f" + {'RandomCrop' if self.random_crop else 'CenterCrop'}({_fmt(self.crop)})"
        return text


Op = RandomResizedCropHead | CropHead | ResizeHead


@dataclass(frozen=True)
class ChoiceHead:
    """``v2.RandomChoice`` over geometric ops of one output size (timm's random interpolation:
    the same crop, bilinear or bicubic per sample)."""

    options: tuple[Op, ...]
    p: tuple[float, ...]

    @property
    def size(self) -> Size | None:
        return self.options[0].size

    def draw(self, height: int, width: int, rng: random.Random) -> Geometry:
        u, acc = rng.random(), 0.0
        for option, p in zip(self.options, self.p, strict=True):
            acc += p
            if u < acc:
                return option.draw(height, width, rng)
        return self.options[-1].draw(height, width, rng)

    def with_size(self, size: Size) -> ChoiceHead:
        return replace(self, options=tuple(o.with_size(size) for o in self.options))

    def describe(self) -> str:
        parts = [f"{o.describe()} p={p:.3g}" for o, p in zip(self.options, self.p, strict=True)]
        return "RandomChoice(" + " | ".join(parts) + ")"


@dataclass(frozen=True)
class Head:
    """A recipe's whole geometric head: one geometric op, then random flips
    (``(("h", 0.5),)``: ``RandomHorizontalFlip(0.5)``; "v" for vertical), in order."""

    op: Op | ChoiceHead
    flips: tuple[tuple[str, float], ...] = ()

    @property
    def size(self) -> Size | None:
        """The output (h, w), or None where it depends on the image (a Resize of the shorter
        side without a crop)."""
        return self.op.size

    def draw(self, height: int, width: int, rng: random.Random) -> Geometry:
        g = self.op.draw(height, width, rng)
        hflip = vflip = False
        for kind, p in self.flips:
            if rng.random() < p:
                if kind == "h":
                    hflip = not hflip
                else:
                    vflip = not vflip
        return g._replace(hflip=hflip, vflip=vflip) if hflip or vflip else g

    def with_size(self, size: Size) -> Head:
        """The same head with output size ``size`` (a size schedule's epoch)."""
        return replace(self, op=self.op.with_size(size))

    def describe(self) -> str:
        names = {"h": "RandomHorizontalFlip", "v": "RandomVerticalFlip"}
        return " + ".join([self.op.describe(), *(f"{names[k]}({p:g})" for k, p in self.flips)])


def train_head(size: Size) -> Head:
    """The built-in train recipe: RandomResizedCrop(size) bilinear, antialiased, + horizontal
    flip (p=0.5)."""
    return Head(RandomResizedCropHead(size), (("h", 0.5),))


def eval_head(size: Size, crop_pct: float = 0.875, interpolation: str = "bilinear") -> Head:
    """The built-in eval recipe: Resize + CenterCrop(size), the resize keeping ``crop_pct`` of
    it: a square ``size`` S resizes the shorter side to int(S / crop_pct) (torchvision's and
    timm's references), an (h, w) one resizes to (int(h / crop_pct), int(w / crop_pct)) as
    timm does."""
    h, w = size
    resize = (int(h / crop_pct),) if h == w else (int(h / crop_pct), int(w / crop_pct))
    return Head(ResizeHead(resize, interpolation=interpolation, crop=size))


_MODES = ("nearest", "nearest-exact", "bilinear", "bicubic", "box", "hamming", "lanczos")
ROW_WIDTH = 15


def to_row(g: Geometry) -> list[int]:
    """``g`` as integers (a row of an ``output="encoded"`` batch's ``geometry`` tensor)."""
    rh, rw = g.resized if g.resized is not None else (-1, -1)
    return [
        *g.source,
        g.top,
        g.left,
        g.height,
        g.width,
        *g.size,
        _MODES.index(g.interpolation),
        int(g.antialias),
        rh,
        rw,
        int(g.hflip),
        int(g.vflip),
        int(g.pad),
    ]


def from_row(row: Sequence[int]) -> Geometry:
    """The :class:`Geometry` :func:`to_row` wrote."""
    r = [int(v) for v in row]
    return Geometry(
        (r[0], r[1]),
        r[2],
        r[3],
        r[4],
        r[5],
        (r[6], r[7]),
        _MODES[r[8]],
        bool(r[9]),
        None if r[10] < 0 else (r[10], r[11]),
        bool(r[12]),
        bool(r[13]),
        bool(r[14]),
    )
