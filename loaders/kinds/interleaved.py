"""Interleaved image-text samples (``make_loader(src, output=Interleaved(...))``,
``loaders.interleaved``): every image of a sample through the recipe (or the native-resolution
rule), seeded per (sample, occurrence, image index); a batch's images as one flat uint8 buffer
(``images``, in the pool slot where it fits) with ``image_sizes`` [N,2] and ``image_owner``
[N]; each sample's order of text and images as ``segments``; with a tokenizer, ``input_ids``
with each image's placeholder run in ``image_spans``."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from loaders.config import LoaderConfig
from loaders.delivery import BatchMeta, Slot
from loaders.interleaved import Interleaved
from loaders.interleaved.sample_parts import (
    IGNORE,
    sample_content,
    segments_of,
    without_images_from,
)
from loaders.kinds.base import NextSample, OutputKind
from loaders.pool import new_tensor, slot_bytes
from loaders.read import Located
from loaders.recipe import Seeder, check_output
from loaders.schema import Pad
from wdstool.base import counters
from wdstool.base.errors import ConfigError, SampleError

try:  # the compiled copies into planes and patches (setup.py); without them torch's copy of a
    # permuted view (to_patches: a model family's layout, loaders.families.Qwen2VL.into)
    from loaders.kinds._planar import to_patches, to_planar
except ImportError:  # pragma: no cover - a build without a C compiler
    to_planar = to_patches = None

POOL_IMAGES = 2  # a slot holds this many of the largest images per sample...
POOL_CAP = 64 << 20  # ...up to this many bytes; a batch of more is allocated, not pooled


class InterleavedKind(OutputKind):
    name = "interleaved"
    pixel_key = "images"
    keys = ("images", "image_sizes", "image_owner", "image_spans", "segments")
    settings = Interleaved
    adds_fields = True  # segments

    def __init__(self, config: LoaderConfig, recipes: tuple[Any, ...]) -> None:
        super().__init__(config, recipes)
        self.spec: Interleaved = config.sample

    @staticmethod
    def applies(config: LoaderConfig) -> bool:
        return isinstance(config.sample, Interleaved)

    @classmethod
    def arguments(
        cls, settings: Any, *, views: Any, output: str, channels_last: bool, repeats: int
    ) -> tuple[str, int]:
        if views is not None:
            raise ConfigError("Interleaved and views: give each image one recipe")
        if output not in ("auto", "uint8"):
            raise ConfigError(
                f"Interleaved with output={output!r}: the images are uint8 (of many sizes); "
                "normalize them on the device"
            )
        if channels_last:
            raise ConfigError("Interleaved and channels_last: the images cross as a flat buffer")
        return "uint8", repeats

    @classmethod
    def settle(cls, sources: Sequence[Any], config: LoaderConfig) -> tuple[list[Any], LoaderConfig]:
        """Numbered image members, KEY.json and KEY.txt read; a recipe that gives uint8 images."""
        recipe = config.recipes.at(0)[0]
        if config.sample.native is None and recipe.dtype not in (torch.uint8, None):
            raise ConfigError(
                "Interleaved: end the transform at uint8 (the images cross as uint8 bytes); "
                "normalize on the device"
            )
        if config.sample.tokenizer is not None and "input_ids" not in dict(config.pads):
            pads = (*config.pads, ("input_ids", Pad(config.sample.pad_id)))
            config = replace(config, pads=pads)
        model = config.sample.model
        if model is not None:
            extra = {"position_ids": Pad(0)}
            if model.positions_key:
                extra[model.positions_key] = Pad(0, dim=1)
            pads = (*config.pads, *((k, v) for k, v in extra.items() if k not in dict(config.pads)))
            config = replace(config, pads=pads)
        if config.sample.chat is not None:
            if any(s.schema.label is not None for s in sources):
                raise ConfigError(
                    "Interleaved(chat=...): a batch's labels are the tokens' (-100 outside the "
                    "loss); pass label=None"
                )
            extra = {"loss_mask": Pad(0), "labels": Pad(IGNORE)}
            pads = (*config.pads, *((k, v) for k, v in extra.items() if k not in dict(config.pads)))
            config = replace(config, pads=pads)
        return [replace(s, schema=replace(s.schema, numbered=True)) for s in sources], config

    @classmethod
    def slot_bytes(cls, config: LoaderConfig) -> int:
        spec: Interleaved = config.sample
        if spec.native is not None:
            pixels = spec.native.max_pixels
        else:
            size = config.recipes.largest()[0]
            if size is None:
                return 0
            h, w = (size, size) if isinstance(size, int) else size
            pixels = h * w
        n = config.epoch.batch_size
        return slot_bytes(min(POOL_CAP, n * POOL_IMAGES * 3 * pixels), n)

    @classmethod
    def describe(cls, config: LoaderConfig) -> str:
        return config.sample.describe()  # type: ignore[no-any-return]

    def decode(
        self, loc: Located, rng: random.Random, seeder: Seeder, where: str
    ) -> tuple[Any, dict[str, Any] | None]:
        payload, fields, dropped = self.decode_counted(loc, rng, seeder, where)
        if dropped:
            counters.count("images_dropped", dropped)
        return payload, fields

    def decode_counted(
        self, loc: Located, rng: random.Random, seeder: Seeder, where: str
    ) -> tuple[Any, dict[str, Any], int]:
        """:meth:`decode`'s payload and fields, and the images it dropped (over
        ``max_images``, or cut by the tokenizer's ``max_length``), not counted yet."""
        content, datas = sample_content(loc.sample, loc.url, self.spec)
        dropped = 0
        most = self.spec.max_images
        if most is not None and len(datas) > most:
            dropped = len(datas) - most
            datas = datas[:most]
            content = without_images_from(content, most)
        base = rng.getrandbits(64)  # each image from its own generator: (sample, image index)
        images = [
            self._image(data, random.Random(base + i), seeder, where)
            for i, data in enumerate(datas)
        ]
        fields: dict[str, Any] = {"segments": segments_of(content)}
        if self.spec.tokenizer is None:
            return (images, None), fields, dropped
        counts = [self.spec.tokens_of(im.shape[1], im.shape[2]) for im in images]
        enc = self.spec.encode(content, counts, where)
        fields["input_ids"] = enc.input_ids
        if enc.loss_mask is not None:  # a conversation: the loss where the model learns
            fields["loss_mask"] = enc.loss_mask
            fields["labels"] = enc.input_ids.masked_fill(~enc.loss_mask, IGNORE)
        images = [images[i] for i in enc.images]
        model = self.spec.model
        if model is not None:  # a model family: text positions, and its own where it has them
            fields["position_ids"] = torch.arange(len(enc.input_ids))
            if model.positions_key:
                sizes = [tuple(im.shape[1:]) for im in images]
                fields[model.positions_key] = model.positions(
                    enc.input_ids, enc.placeholders, sizes
                )
        return (images, enc.placeholders), fields, dropped + enc.images_dropped

    def _image(self, data: bytes, rng: random.Random, seeder: Seeder, where: str) -> torch.Tensor:
        own = getattr(self.spec.model, "image", None)
        if own is not None:  # the family's processor transforms it (a fixed-size encoder's)
            return own(data, where)  # type: ignore[no-any-return]
        native = self.spec.native
        if native is not None:
            return native.strided(data, where)
        scaled = self.config.batch.scaled_decode
        img = self.recipes[0](data, rng, seeder, None, scaled=scaled, where=where)
        check_output(img, where, torch.uint8)
        if img.ndim != 3 or img.shape[0] != 3:
            raise SampleError(f"{where}: the transform returned {list(img.shape)}, not [3,H,W]")
        return img

    def fill(self, next_sample: NextSample, n: int, out: Slot, meta: BatchMeta) -> dict[str, Any]:
        images: list[torch.Tensor] = []
        owners: list[int] = []
        spans: list[tuple[int, int]] = []
        for i in range(n):
            got = next_sample()
            kept, placeholders = got.payload
            images.extend(kept)
            owners.extend([i] * len(kept))
            if placeholders is not None:
                spans.extend(placeholders)
            meta.add(i, got)
        sizes = torch.tensor([list(im.shape[1:]) for im in images], dtype=torch.int64)
        batch = {
            "images": flat_images(images, out, getattr(self.spec.model, "into", None)),
            "image_sizes": sizes.reshape(len(images), 2),
            "image_owner": torch.tensor(owners, dtype=torch.int64),
        }
        if self.spec.tokenizer is not None:
            batch["image_spans"] = torch.tensor(spans, dtype=torch.int64).reshape(len(images), 2)
        return batch


def flat_images(images: list[torch.Tensor], out: Slot, into: Any = None) -> Any:
    """``images`` one after another in one flat uint8 buffer (carved out of the batch's slot
    where it fits, else a buffer of its own), as it crosses to the loader; ``into(dst,
    image)``: how an image is laid out there (a model family's: its patches), else its
    planes."""
    total = sum(im.numel() for im in images)
    try:
        flat = out.tensor((total,), (1,), torch.uint8)
    except ValueError:  # more than the slot holds
        flat = new_tensor((total,), (1,), torch.uint8, out.shared)
    at = 0
    into = into or into_planes
    for im in images:
        into(flat[at : at + im.numel()], im)
        at += im.numel()
    return out.send(flat)


def into_planes(dst: torch.Tensor, im: torch.Tensor) -> None:
    """A uint8 [3,h,w] image into ``dst`` (flat, contiguous) as its three planes. An image
    whose pixels lie interleaved (the decoder's, a channels-last resize's) goes through
    :mod:`loaders.kinds._planar` where it was compiled (0.25 ms a 1 MP image; torch's copy of
    the permuted view: 2.3 ms)."""
    hwc = im.permute(1, 2, 0)
    if to_planar is not None and hwc.is_contiguous():
        to_planar(hwc.numpy(), dst.numpy())
    else:
        dst.view(im.shape).copy_(im)


def split_images(batch: dict[str, Any]) -> list[torch.Tensor]:
    """The images of an interleaved batch, each a uint8 [3,h,w] view of ``batch["images"]``
    (no copy; on whatever device the batch is), in the order of ``image_owner``."""
    flat, out, at = batch["images"], [], 0
    for h, w in batch["image_sizes"].tolist():
        out.append(flat[at : at + 3 * h * w].view(3, h, w))
        at += 3 * h * w
    return out


__all__ = ["InterleavedKind", "split_images"]
