"""A recipe's geometry executed: the region of an encoded image decoded and resized into a slot.

:func:`render` decodes only what a :class:`~loaders.recipe.geometry.Geometry` needs of a JPEG
(``wdstool.format.decode.decode_crop``: rows above the region skipped, columns outside a band
never decoded, nothing below it), optionally at 1/2, 1/4 or 1/8 scale in the DCT domain when the
region is more than twice the output on both sides (``scaled``), then resizes it straight into
the batch slot. :func:`apply` does the same to an image already decoded, exactly as torchvision's
v2 ops do it (``crop`` + ``resize``, ``resize`` + ``center_crop``, flips): for a crop-first
geometry (RandomResizedCrop, CenterCrop, RandomCrop) the region decode gives the very pixels a
whole decode has there, so :func:`render` with ``scaled=False`` equals torchvision's pipeline
on the whole image bit for bit. A resize-first geometry (Resize + CenterCrop) needs the whole
image for exact pixels; with ``scaled`` its region is decoded at a reduced scale where that
applies (large images), and resized directly.
"""

from __future__ import annotations

import torch
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F

from loaders.recipe.geometry import Geometry, Size
from wdstool.format.decode import PARTIAL_DECODE, decode_crop, decode_hwc, decode_rgb, scale_for
from wdstool.format.images import MAX_PIXELS, is_jpeg

try:  # torchvision's own rule for when a uint8 resize runs natively (else through float32)
    from torchvision.transforms.v2.functional._geometry import _do_native_uint8_resize_on_cpu
except ImportError:  # moved: every resize goes through F.resize (exact, a little slower)

    def _do_native_uint8_resize_on_cpu(interpolation: InterpolationMode) -> bool:
        return False


# the antialiased uint8 kernels torchvision's F.resize reaches, called with out= (no copy of the
# result; its wrappers cost ~18 us a sample, 1.5% of a worker's time here): the same values
_AA_OUT = {
    "bilinear": getattr(getattr(torch.ops.aten, "_upsample_bilinear2d_aa", None), "out", None),
    "bicubic": getattr(getattr(torch.ops.aten, "_upsample_bicubic2d_aa", None), "out", None),
}
_FLIP_OUT = getattr(getattr(torch.ops.aten, "flip", None), "out", None)
_NATIVE = {
    name: kernel is not None and _do_native_uint8_resize_on_cpu(InterpolationMode(name))
    for name, kernel in _AA_OUT.items()
}


def _flip_dims(g: Geometry) -> list[int]:
    return [d for d, on in ((-2, g.vflip), (-1, g.hflip)) if on]


def _finish(img: torch.Tensor, g: Geometry, out: torch.Tensor | None) -> torch.Tensor:
    """Flip ``img`` as ``g`` says, into ``out`` when given."""
    dims = _flip_dims(g)
    if out is None:
        return img.flip(dims) if dims else img
    if dims and _FLIP_OUT is not None and img.dtype == out.dtype:
        _FLIP_OUT(img, dims, out=out)
    else:
        out.copy_(img.flip(dims) if dims else img)
    return out


def resize_into(crop: torch.Tensor, g: Geometry, out: torch.Tensor | None = None) -> torch.Tensor:
    """``crop`` [3,h,w] resized to ``g.size`` as ``F.resize`` does it (``g.interpolation``,
    ``g.antialias``; unchanged when already that size), flipped, into ``out`` when given."""
    size: Size = g.size
    if tuple(crop.shape[-2:]) == size:
        return _finish(crop, g, out)
    kernel = _AA_OUT.get(g.interpolation)
    if (
        out is not None
        and kernel is not None
        and g.antialias
        and _NATIVE[g.interpolation]
        and crop.device.type == "cpu"
        and crop.dtype == out.dtype == torch.uint8
    ):
        # flipped: resize into a scratch laid out as ``out``, then flip into the slot (for a
        # channels-last slot the resize writes packed pixels, ~79 us; resizing to [3,S,S] and
        # flipping across layouts would cost ~214 us in all)
        target = torch.empty_like(out) if (g.hflip or g.vflip) else out
        try:
            kernel(crop.unsqueeze(0), list(size), False, out=target.unsqueeze(0))
            return _finish(target, g, out) if target is not out else out
        except (RuntimeError, TypeError):  # an unexpected layout or a changed signature
            pass
    resized = F.resize(
        crop, list(size), interpolation=InterpolationMode(g.interpolation), antialias=g.antialias
    )
    return _finish(resized, g, out)


def apply(img: torch.Tensor, g: Geometry, out: torch.Tensor | None = None) -> torch.Tensor:
    """``g`` applied to a whole decoded image [3,H,W] as torchvision's ops apply it."""
    if g.resized is not None:
        mode = InterpolationMode(g.interpolation)
        img = F.resize(img, list(g.resized), interpolation=mode, antialias=g.antialias)
    if g.pad:
        return _finish(F.center_crop(img, list(g.size)), g, out)
    region = img[..., g.top : g.top + g.height, g.left : g.left + g.width]
    if g.resized is not None:
        return _finish(region, g, out)
    return resize_into(region, g, out)


def apply_frames(frames: torch.Tensor, g: Geometry, out: torch.Tensor) -> torch.Tensor:
    """``g`` applied to every frame of ``frames`` [T,3,H,W] (a video clip) into ``out``
    [T,3,h,w], each frame as :func:`apply` would: one resize call for the clip where the crop
    comes first (RandomResizedCrop, CenterCrop), as torchvision's antialiased kernel computes
    it per frame; frame by frame otherwise."""
    kernel = _AA_OUT.get(g.interpolation)
    batched = g.resized is None and not g.pad and g.antialias and kernel is not None
    if batched and _NATIVE[g.interpolation] and tuple(g.size) != (g.height, g.width):
        region = frames[..., g.top : g.top + g.height, g.left : g.left + g.width]
        target = torch.empty_like(out) if (g.hflip or g.vflip) else out
        try:
            kernel(region, list(g.size), False, out=target)
            return _finish(target, g, out) if target is not out else out
        except (RuntimeError, TypeError):  # an unexpected layout: frame by frame
            pass
    for t in range(frames.shape[0]):
        apply(frames[t], g, out[t])
    return out


def render(
    data: bytes,
    g: Geometry,
    out: torch.Tensor | None = None,
    *,
    partial: bool = PARTIAL_DECODE,
    scaled: bool = True,
    max_pixels: int = MAX_PIXELS,
    where: str = "",
) -> torch.Tensor:
    """``apply(decode_rgb(data), g, out)``, decoding only ``g``'s region of a JPEG: the same
    pixels, except where ``scaled`` lets a region more than twice the output on both sides be
    decoded at a reduced scale (see the module's docstring). Other formats, and JPEGs the
    partial decoder declines, are decoded whole."""
    if not partial:
        return apply(decode_rgb(data, max_pixels=max_pixels, where=where), g, out)
    if not g.pad and is_jpeg(data):
        crop = None
        if g.resized is None:
            scale = scale_for(g.height, g.width, g.size) if scaled else 1
            crop = decode_crop(data, g.top, g.left, g.height, g.width, scale=scale)
        elif scaled:
            top, left, h, w = g.source_box()
            scale = scale_for(h, w, g.size)
            if scale > 1:
                crop = decode_crop(data, top, left, h, w, scale=scale)
        if crop is not None:
            return resize_into(crop, g, out)
    return apply(decode_hwc(data, max_pixels=max_pixels, where=where), g, out)


__all__ = ["apply", "apply_frames", "render", "resize_into"]
