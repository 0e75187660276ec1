"""``Interleaved``: a loader whose samples are several images and text.

``make_loader(src, output=Interleaved(...))``: every image of a sample goes through the loader's
recipe (``transform`` / ``image_size``, seeded per sample, occurrence and image index) or, with
``native=NativeResolution(...)``, is kept near its own size. A batch's images cross as one flat
uint8 buffer (``images``: each image's [3,h,w] pixels one after another, no padding) with
``image_sizes`` [N,2] (h, w) and ``image_owner`` [N] (the sample of the batch each belongs
to); ``segments`` lists each sample's order of text and images (a str, or an image's index in
the sample); ``loaders.split_images(batch)`` gives the images back as tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

from loaders.interleaved.native import NativeResolution
from wdstool.base.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Interleaved:
    """Samples of several images and text (see the module's docstring). ``max_images``: the
    images kept per sample (its first ones, the rest and their places in ``segments`` dropped
    and counted); None: all."""

    native: NativeResolution | None = None
    max_images: int | None = None

    def __post_init__(self) -> None:
        if self.native is not None and not isinstance(self.native, NativeResolution):
            raise ConfigError(
                f"Interleaved: native={self.native!r}: give a loaders.NativeResolution(...)"
            )
        m = self.max_images
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 0):
            raise ConfigError(f"Interleaved: max_images must be an int >= 0, got {m!r}")

    def describe(self) -> str:
        how = (
            f"native resolution ({self.native.min_pixels}-{self.native.max_pixels} px, "
            f"sides x{self.native.patch})"
            if self.native is not None
            else "every image through the recipe"
        )
        most = f", at most {self.max_images} images a sample" if self.max_images is not None else ""
        return f"interleaved samples: {how}{most}"


__all__ = ["Interleaved"]
