"""Decode and augmentation: formats, bombs, determinism, equivalence with torchvision."""

from __future__ import annotations

import io
import random

import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from loaders.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    eval_augment,
    normalize,
    random_resized_crop_params,
    train_augment,
)
from wdstool.base.errors import SampleError
from wdstool.format.decode import decode_rgb


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


NOISE = Image.effect_noise((60, 40), 50)


@pytest.mark.parametrize(
    "data",
    [
        encode(NOISE.convert("RGB"), "JPEG"),
        encode(NOISE.convert("L"), "JPEG"),
        encode(NOISE.convert("CMYK"), "JPEG"),
        encode(NOISE.convert("RGBA"), "PNG"),
        encode(NOISE.convert("RGB"), "WEBP"),
        encode(NOISE.convert("RGB"), "BMP"),
        encode(NOISE.convert("P"), "GIF"),
        encode(NOISE.convert("RGB"), "TIFF"),
    ],
    ids=["jpeg", "grey-jpeg", "cmyk-jpeg", "png-alpha", "webp", "bmp", "gif", "tiff"],
)
def test_formats_decode_to_uint8_rgb(data: bytes) -> None:
    img = decode_rgb(data, "bin")
    assert img.dtype == torch.uint8 and img.shape == (3, 40, 60)


def test_corrupt_and_bomb() -> None:
    with pytest.raises(SampleError, match="k1"):
        decode_rgb(b"\xff\xd8\xff\xe0" + b"\x00" * 100, "jpg", where="k1")
    with pytest.raises(SampleError):
        decode_rgb(b"not an image at all", "png")
    with pytest.raises(SampleError):
        decode_rgb(b"", "jpg")
    # a JPEG whose frame header declares 60000 x 60000: refused before any decode
    jpg = bytearray(encode(Image.new("RGB", (16, 16)), "JPEG"))
    sof = jpg.find(b"\xff\xc0")
    jpg[sof + 5 : sof + 9] = (60000).to_bytes(2, "big") * 2
    with pytest.raises(SampleError, match="too large: 60000x60000"):
        decode_rgb(bytes(jpg), "jpg")


def test_rrc_params_properties() -> None:
    rng = random.Random(0)
    for _ in range(2000):
        h0, w0 = rng.randint(20, 600), rng.randint(20, 600)
        top, left, h, w = random_resized_crop_params(h0, w0, rng)
        assert top >= 0 and top + h <= h0 and left >= 0 and left + w <= w0 and h > 0 and w > 0
    # impossible scale forces the central fallback, clamped to the ratio bounds
    top, left, h, w = random_resized_crop_params(100, 400, random.Random(1), scale=(2.0, 3.0))
    assert (h, w) == (100, 133) and (top, left) == (0, (400 - 133) // 2)


def test_train_augment_deterministic_and_in_place() -> None:
    img = decode_rgb(encode(NOISE.convert("RGB").resize((120, 90)), "JPEG"), "jpg")
    a = train_augment(img, 32, random.Random(5))
    b = train_augment(img, 32, random.Random(5))
    assert a.shape == (3, 32, 32) and a.dtype == torch.uint8 and torch.equal(a, b)
    out = torch.zeros(2, 3, 32, 32, dtype=torch.uint8)
    train_augment(img, 32, random.Random(5), out=out[1])
    assert torch.equal(out[1], a) and not out[0].any()


def test_eval_augment_equals_torchvision() -> None:
    img = decode_rgb(encode(NOISE.convert("RGB").resize((150, 97)), "JPEG"), "jpg")
    reference = v2.Compose([v2.Resize(int(48 / 0.875), antialias=True), v2.CenterCrop(48)])(img)
    assert torch.equal(eval_augment(img, 48), reference)


def test_normalize_matches_reference() -> None:
    x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    torch.testing.assert_close(normalize(x), (x.float() / 255 - mean) / std, atol=1e-5, rtol=1e-5)
    assert normalize(x[0]).shape == (3, 8, 8)


def test_normalize_into_equals_normalize() -> None:
    from loaders.augment import normalize, normalize_into

    x = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8)
    out = torch.empty(x.shape, dtype=torch.float32)
    assert normalize_into(x, out) is out
    assert torch.allclose(out, normalize(x))


def test_direct_resize_kernel_equals_torchvision_resize() -> None:
    import torchvision.transforms.v2.functional as F

    from loaders.augment import _resize_aa

    gen = torch.Generator().manual_seed(0)
    img = torch.randint(0, 256, (3, 97, 131), dtype=torch.uint8, generator=gen)
    for crop in (img, img[:, 5:80, 7:120], img[:, :, ::1][:, 1:, 2:]):
        assert torch.equal(_resize_aa(crop, 32), F.resize(crop, [32, 32], antialias=True))
