"""Decode and augmentation: formats, bombs, determinism, equivalence with torchvision."""

from __future__ import annotations

import io
import random

import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from loaders.recipe.builtin import eval_augment, train_augment
from loaders.recipe.geometry import random_resized_crop_params
from loaders.recipe.normalize import IMAGENET_MEAN, IMAGENET_STD, normalize
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
    from loaders.recipe.normalize import normalize, normalize_into

    x = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8)
    out = torch.empty(x.shape, dtype=torch.float32)
    assert normalize_into(x, out) is out
    assert torch.allclose(out, normalize(x))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest"])
@pytest.mark.parametrize("flips", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_resize_into_a_slot_equals_torchvision(
    mode: str, flips: tuple, channels_last: bool
) -> None:
    """resize_into (the kernels called with out=, into a batch slot of either layout) gives
    what F.resize + flips give, for every crop layout and size, square or not."""
    import torchvision.transforms.v2.functional as F
    from torchvision.transforms.v2 import InterpolationMode

    from loaders.pool import new_batch
    from loaders.recipe.geometry import Geometry
    from loaders.recipe.region_decode import resize_into

    gen = torch.Generator().manual_seed(0)
    img = torch.randint(0, 256, (3, 97, 131), dtype=torch.uint8, generator=gen)
    for size in ((32, 32), (24, 40)):
        slot = new_batch(1, size, False, torch.uint8, channels_last)[0]
        for crop in (img, img[:, 5:80, 7:120], img[:, 1:, 2:], img[:, 3 : 3 + size[0], : size[1]]):
            g = Geometry((97, 131), 0, 0, 0, 0, size, mode, hflip=flips[0], vflip=flips[1])
            want = F.resize(crop, list(size), interpolation=InterpolationMode(mode))
            want = want.flip([d for d, on in ((-2, flips[1]), (-1, flips[0])) if on])
            assert resize_into(crop, g, slot) is slot and torch.equal(slot, want)
            assert torch.equal(resize_into(crop, g), want)
