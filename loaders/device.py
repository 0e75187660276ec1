"""Decode and augment on the training device: ``make_loader(..., output="encoded")`` batches.

With ``output="encoded"`` the DataLoader workers only read shards, parse each image's header
and draw its augmentation (the same seeded draws as the CPU path); they ship the compressed
bytes (one uint8 tensor and offsets: ~10x fewer bytes than uint8 pixels) with the crop boxes
and flips. :class:`DeviceDecoder` then decodes the whole batch at once on the GPU
(``torchvision.io.decode_jpeg(list, device="cuda")``, nvJPEG), crops, resizes (antialiased),
flips and normalizes there. This moves the dominant CPU cost (JPEG decode, ~1.3 ms an
ImageNet image on one core here) off the host, for machines with few cores per GPU.

On ``device="cpu"`` the same code runs on the host (tests; hosts without a GPU) and gives the
very pixels of ``output="uint8"`` (same decoder, same crop, same resize kernel). nvJPEG's IDCT
differs from libjpeg-turbo's by a few levels in some pixels, so on CUDA the pixels are close,
not identical. PNG, WEBP and other non-JPEG samples are decoded on the host, then moved.
"""

from __future__ import annotations

from typing import Any

import torch
from torchvision.io import ImageReadMode, decode_image, decode_jpeg

from loaders.augment import IMAGENET_MEAN, IMAGENET_STD, apply_train, eval_augment, normalize
from wdstool.format.images import is_jpeg


def split_encoded(batch: dict[str, Any]) -> list[torch.Tensor]:
    """The per-sample byte tensors of an encoded batch (views, no copy)."""
    data, offsets = batch["encoded"], batch["offsets"].tolist()
    return [data[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


class DeviceDecoder:
    """Turns an ``output="encoded"`` batch into pixels on ``device``.

    ``output="float"`` (default): normalized float32 [B,3,S,S] (``mean``/``std``);
    ``"uint8"``: the raw pixels, as ``output="uint8"`` batches carry them.
    """

    def __init__(
        self,
        image_size: int = 224,
        *,
        train: bool = True,
        device: str | torch.device = "cuda",
        output: str = "float",
        mean: tuple[float, ...] = IMAGENET_MEAN,
        std: tuple[float, ...] = IMAGENET_STD,
    ) -> None:
        if output not in ("float", "uint8"):
            raise ValueError(f"output={output!r} is not one of 'float', 'uint8'")
        self.image_size = image_size
        self.train = train
        self.device = torch.device(device)
        self.output = output
        self.mean, self.std = mean, std

    def decode(self, batch: dict[str, Any]) -> list[torch.Tensor]:
        """Every image of the batch as uint8 [3,H,W] on the device, JPEGs in one call."""
        datas = split_encoded(batch)
        jpeg = [is_jpeg(bytes(d[:12].numpy())) for d in datas]  # as the workers judged it
        images: list[torch.Tensor | None] = [None] * len(datas)
        jpegs = [i for i, j in enumerate(jpeg) if j]
        if jpegs:
            decoded = decode_jpeg(
                [datas[i] for i in jpegs], mode=ImageReadMode.RGB, device=self.device
            )
            for i, img in zip(jpegs, decoded, strict=True):
                images[i] = img
        for i, j in enumerate(jpeg):
            if not j:
                img = decode_image(datas[i], mode=ImageReadMode.RGB)
                images[i] = (img[0] if img.ndim == 4 else img).to(self.device)
        return images  # type: ignore[return-value]

    def __call__(self, batch: dict[str, Any]) -> torch.Tensor:
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
