"""Decode and augment on the training device: ``make_loader(..., output="encoded")`` batches.

With ``output="encoded"`` the DataLoader workers only read shards, parse each image's header
and draw its recipe's geometry (the same seeded draws as the CPU path); they ship the compressed
bytes (one uint8 tensor and offsets: ~10x fewer bytes than uint8 pixels) with one row of
geometry per sample (``geometry``: ``loaders.recipe.to_row``). :class:`DeviceDecoder` then
decodes the whole batch at once on the GPU (``wdstool.format.decode.decode_jpegs``: nvJPEG
through torchvision, or TorchCodec once torchvision's codecs are gone), crops, resizes
(antialiased), flips and normalizes there (``loaders.recipe.region_decode.apply``: torchvision's ops,
on the device). This moves the dominant CPU cost (JPEG decode, ~1.3 ms an ImageNet image on one
core here) off the host, for machines with few cores per GPU. Only a geometric recipe can run
this way (``make_loader`` refuses a pipeline with pixel ops after the crop).

``host_decode`` (the default on ``device="cpu"``: tests, hosts without a GPU): the workers' own
decode runs on the host and gives the very pixels of ``output="uint8"`` (same partial and
scaled decode; pass the loader's ``scaled_decode``). ``host_decode=False`` runs the device path
on any device, the CPU included: whole images decoded, then the geometry applied with
torchvision's ops — on the CPU the exact pixels of ``output="uint8"`` with
``scaled_decode=False``. nvJPEG decodes whole images at full scale, and its IDCT differs from
libjpeg-turbo's by a few levels in some pixels, so on CUDA the pixels are close, not identical.
PNG, WEBP and other non-JPEG samples are decoded on the host, then moved.
"""

from __future__ import annotations

from typing import Any

import torch

from loaders.recipe import Geometry, as_size, from_row
from loaders.recipe.normalize import IMAGENET_MEAN, IMAGENET_STD, normalize
from loaders.recipe.region_decode import apply, render
from wdstool.base.errors import ConfigError
from wdstool.format.decode import decode_jpegs, decode_rgb
from wdstool.format.images import is_jpeg


def split_encoded(batch: dict[str, Any]) -> list[torch.Tensor]:
    """The per-sample byte tensors of an encoded batch (views, no copy)."""
    data, offsets = batch["encoded"], batch["offsets"].tolist()
    return [data[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def geometries(batch: dict[str, Any]) -> list[Geometry]:
    """The per-sample geometry of an encoded batch."""
    return [from_row(row) for row in batch["geometry"].tolist()]


class DeviceDecoder:
    """Turns an ``output="encoded"`` batch into pixels on ``device``.

    ``output="float"`` (default): normalized float32 [B,3,H,W] (``mean``/``std``);
    ``"uint8"``: the raw pixels, as ``output="uint8"`` batches carry them. The output size is
    the recipe's (each batch says it); ``image_size``, if given, is checked against it.
    ``host_decode`` and ``scaled_decode``: see the module's docstring.
    """

    def __init__(
        self,
        image_size: int | tuple[int, int] | None = None,
        *,
        device: str | torch.device = "cuda",
        output: str = "float",
        scaled_decode: bool = True,
        host_decode: bool | None = None,
        mean: tuple[float, ...] = IMAGENET_MEAN,
        std: tuple[float, ...] = IMAGENET_STD,
    ) -> None:
        if output not in ("float", "uint8"):
            raise ValueError(f"output={output!r} is not one of 'float', 'uint8'")
        self.image_size = None if image_size is None else as_size(image_size)
        self.device = torch.device(device)
        self.output = output
        self.scaled_decode = scaled_decode
        self.host_decode = self.device.type == "cpu" if host_decode is None else host_decode
        self.mean, self.std = mean, std

    def decode(self, batch: dict[str, Any]) -> list[torch.Tensor]:
        """Every image of the batch as uint8 [3,H,W] on the device, JPEGs in one call."""
        datas = split_encoded(batch)
        jpeg = [is_jpeg(bytes(d[:12].numpy())) for d in datas]  # as the workers judged it
        images: list[torch.Tensor | None] = [None] * len(datas)
        jpegs = [i for i, j in enumerate(jpeg) if j]
        if jpegs:
            decoded = decode_jpegs([datas[i] for i in jpegs], self.device)
            for i, img in zip(jpegs, decoded, strict=True):
                images[i] = img
        for i, j in enumerate(jpeg):
            if not j:
                images[i] = decode_rgb(bytes(datas[i].numpy())).to(self.device)
        return images  # type: ignore[return-value]

    def _size(self, geoms: list[Geometry]) -> tuple[int, int]:
        sizes = {g.size for g in geoms}
        if len(sizes) != 1:
            raise ConfigError(f"an encoded batch of several output sizes: {sorted(sizes)}")
        size = sizes.pop()
        if self.image_size is not None and size != self.image_size:
            raise ConfigError(
                f"DeviceDecoder(image_size={self.image_size}) but the batch's recipe outputs "
                f"{size}: make both the same (or leave image_size out)"
            )
        return size

    def __call__(self, batch: dict[str, Any]) -> torch.Tensor:
        geoms = geometries(batch)
        h, w = self._size(geoms) if geoms else (self.image_size or (0, 0))
        if self.host_decode:  # the workers' own decode, on the host, into the batch
            out = torch.empty((len(geoms), 3, h, w), dtype=torch.uint8)
            datas = [bytes(d.numpy()) for d in split_encoded(batch)]
            for i, (data, g) in enumerate(zip(datas, geoms, strict=True)):
                render(data, g, out[i], scaled=self.scaled_decode)
            out = out.to(self.device)
        else:
            images = self.decode(batch)
            out = torch.empty((len(geoms), 3, h, w), dtype=torch.uint8, device=self.device)
            for i, (img, g) in enumerate(zip(images, geoms, strict=True)):
                out[i] = apply(img, g)
        return out if self.output == "uint8" else normalize(out, self.mean, self.std)
