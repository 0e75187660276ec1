"""Decode and augment on the training device: ``make_loader(..., output="encoded")`` batches.

With ``output="encoded"`` the DataLoader workers only read shards, parse each image's header
and draw its augmentation (the same seeded draws as the CPU path); they ship the compressed
bytes (one uint8 tensor and offsets: ~10x fewer bytes than uint8 pixels) with the crop boxes
and flips. :class:`DeviceDecoder` then decodes the whole batch at once on the GPU
(``wdstool.format.decode.decode_jpegs``: nvJPEG through torchvision, or TorchCodec once
torchvision's codecs are gone), crops, resizes (antialiased), flips and normalizes there. This moves the dominant CPU cost (JPEG decode, ~1.3 ms an
ImageNet image on one core here) off the host, for machines with few cores per GPU.

On ``device="cpu"`` the workers' own decode runs on the host (tests; hosts without a GPU) and
gives the very pixels of ``output="uint8"`` (same partial and scaled decode, same crop, same
resize kernel; pass the loader's ``scaled_decode``). nvJPEG decodes whole images at full scale,
and its IDCT differs from libjpeg-turbo's by a few levels in some pixels, so on CUDA the pixels
are close, not identical. PNG, WEBP and other non-JPEG samples are decoded on the host, then
moved.
"""

from __future__ import annotations

from typing import Any

import torch

from loaders.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    apply_train,
    decode_train,
    eval_augment,
    eval_sample,
    normalize,
)
from wdstool.format.decode import decode_jpegs, decode_rgb
from wdstool.format.images import is_jpeg


def split_encoded(batch: dict[str, Any]) -> list[torch.Tensor]:
    """The per-sample byte tensors of an encoded batch (views, no copy)."""
    data, offsets = batch["encoded"], batch["offsets"].tolist()
    return [data[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


class DeviceDecoder:
    """Turns an ``output="encoded"`` batch into pixels on ``device``.

    ``output="float"`` (default): normalized float32 [B,3,S,S] (``mean``/``std``);
    ``"uint8"``: the raw pixels, as ``output="uint8"`` batches carry them. ``scaled_decode``:
    as ``make_loader``'s, for ``device="cpu"`` (the host decode); nvJPEG decodes at full scale.
    """

    def __init__(
        self,
        image_size: int = 224,
        *,
        train: bool = True,
        device: str | torch.device = "cuda",
        output: str = "float",
        scaled_decode: bool = True,
        mean: tuple[float, ...] = IMAGENET_MEAN,
        std: tuple[float, ...] = IMAGENET_STD,
    ) -> None:
        if output not in ("float", "uint8"):
            raise ValueError(f"output={output!r} is not one of 'float', 'uint8'")
        self.image_size = image_size
        self.train = train
        self.device = torch.device(device)
        self.output = output
        self.scaled_decode = scaled_decode
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

    def _on_host(self, batch: dict[str, Any]) -> torch.Tensor:
        """device="cpu": the workers' own decode + augmentation, sample by sample."""
        size = self.image_size
        datas = [bytes(d.numpy()) for d in split_encoded(batch)]
        out = torch.empty((len(datas), 3, size, size), dtype=torch.uint8)
        scaled = self.scaled_decode
        if self.train:
            crops, flips = batch["crops"].tolist(), batch["flips"].tolist()
            for i, data in enumerate(datas):
                params = (*crops[i], bool(flips[i]))
                decode_train(data, size, params, out[i], scaled=scaled)  # type: ignore[arg-type]
        else:
            for i, data in enumerate(datas):
                eval_sample(data, size, out[i], scaled=scaled)
        return out

    def __call__(self, batch: dict[str, Any]) -> torch.Tensor:
        if self.device.type == "cpu":
            out = self._on_host(batch)
            return out if self.output == "uint8" else normalize(out, self.mean, self.std)
        images = self.decode(batch)
        size = self.image_size
        out = torch.empty((len(images), 3, size, size), dtype=torch.uint8, device=self.device)
        if self.train:
            crops = batch["crops"].tolist()
            flips = batch["flips"].tolist()
            for i, img in enumerate(images):
                out[i] = apply_train(img, size, (*crops[i], bool(flips[i])))
        else:
            for i, img in enumerate(images):
                out[i] = eval_augment(img, size)
        if self.output == "uint8":
            return out
        return normalize(out, self.mean, self.std)
