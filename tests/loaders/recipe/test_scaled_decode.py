"""Scaled decode: a JPEG region more than twice the output decoded at 1/2, 1/4 or 1/8 scale in
the DCT domain (wdstool/format/_jpegcrop.c), combined with the partial decode; the train and eval
paths, the option that keeps exact pixels, the fallbacks."""

from __future__ import annotations

import io
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import wdstool.format.decode as decode
from loaders.recipe.builtin import (
    apply_train,
    decode_train,
    eval_augment,
    eval_box,
    eval_sample,
    train_params,
)
from tests.support.jpegs import KINDS
from tests.support.jpegs import jpeg as _jpeg
from tests.support.jpegs import noise as _noise
from wdstool.base.errors import SampleError
from wdstool.format.decode import SCALES, decode_crop, decode_rgb, scale_for, scaled_box

needs_ext = pytest.mark.skipif(decode._jpegcrop is None, reason="_jpegcrop not built")
# against the exact path, over all scaled crops of a test (bench/decode_quality.py measured
# 35.3 dB over 277 scaled 224-px crops of 1600x1200 sample-data images), and per crop
PSNR_FLOOR_DB, CROP_PSNR_FLOOR_DB = 30.0, 20.0


def libjpeg_scaled(data: bytes, scale: int) -> torch.Tensor:
    """The reference: libjpeg's own decode of the whole image at 1/scale (PIL's Image.draft,
    Pillow's bundled libjpeg-turbo: islow IDCT, fancy upsampling), [3,H,W]."""
    with Image.open(io.BytesIO(data)) as img:
        width, height = img.size
        img.draft("RGB", (width // scale, height // scale))
        assert img.size == (-(-width // scale), -(-height // scale))
        arr = np.asarray(img.convert("RGB"))
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


@given(
    h=st.integers(1, 6000),
    w=st.integers(1, 6000),
    size=st.integers(8, 600),
    data=st.data(),
)
def test_the_scale_rule_and_the_scaled_box(h: int, w: int, size: int, data) -> None:
    """More than twice the output on both sides: the largest reduction keeping the region at
    least the output size; otherwise none. The box stays inside the scaled image and keeps at
    least ``size`` pixels a side."""
    d = scale_for(h, w, size)
    if min(h, w) <= 2 * size:
        assert d == 1
        return
    assert d in SCALES and min(h, w) >= d * size
    assert d == 8 or min(h, w) < 2 * d * size
    height = data.draw(st.integers(h, h + 500))
    width = data.draw(st.integers(w, w + 500))
    top, left = data.draw(st.integers(0, height - h)), data.draw(st.integers(0, width - w))
    t, x, bh, bw = scaled_box(top, left, h, w, d)
    assert t >= 0 and x >= 0 and bh >= size and bw >= size
    assert t + bh <= -(-height // d) and x + bw <= -(-width // d)


@needs_ext
@settings(max_examples=120, deadline=None)
@given(
    kind=st.sampled_from(sorted(KINDS)),
    w=st.integers(16, 260),
    h=st.integers(16, 200),
    scale=st.sampled_from(SCALES),
    data=st.data(),
)
def test_scaled_rectangles_are_libjpegs_scaled_decode(kind, w, h, scale, data) -> None:
    """Any rectangle at any scale, every chroma subsampling, progressive, restart markers,
    grey: the pixels of libjpeg's whole scaled decode at the scaled box (the 8-pixel margin,
    in scaled pixels, keeps the partial decode's edges off the result). Rectangles of at
    least ``scale`` pixels a side (scaled decodes are asked for much larger ones)."""
    jpeg = _jpeg(w, h, kind, seed=w * 7 + h)
    left, top = data.draw(st.integers(0, w - scale)), data.draw(st.integers(0, h - scale))
    cw, ch = data.draw(st.integers(scale, w - left)), data.draw(st.integers(scale, h - top))
    crop = decode_crop(jpeg, top, left, ch, cw, scale=scale)
    assert crop is not None
    t, x, bh, bw = scaled_box(top, left, ch, cw, scale)
    reference = libjpeg_scaled(jpeg, scale)
    assert crop.shape == (3, bh, bw)
    assert torch.equal(crop, reference[:, t : t + bh, x : x + bw])


@needs_ext
def test_train_crops_at_every_scale_equal_the_reference_and_stay_close_to_exact() -> None:
    """decode_train(scaled=True) == the antialiased resize of libjpeg's scaled decode at the
    scaled box; crops of at most twice the output are the exact path's pixels; every scaled
    crop stays above the PSNR floor against the exact path."""
    from shard_writer.sample_data import render

    rng = random.Random(4)
    seen = set()
    pairs = []
    for i in range(6):
        jpeg = render(1, i, 10, (900, 700))
        whole = decode_rgb(jpeg)
        for size in (64, 160) * 6:
            params = train_params(whole.shape[1], whole.shape[2], rng)
            top, left, h, w, flip = params
            d = scale_for(h, w, size)
            seen.add(d)
            slot = torch.empty((3, size, size), dtype=torch.uint8)
            got = decode_train(jpeg, size, params, slot, scaled=True)
            assert got.data_ptr() == slot.data_ptr()
            exact = apply_train(whole, size, params)
            assert torch.equal(decode_train(jpeg, size, params, scaled=False), exact)
            if d == 1:
                assert torch.equal(got, exact)
                continue
            t, x, bh, bw = scaled_box(top, left, h, w, d)
            ref = libjpeg_scaled(jpeg, d)[:, t : t + bh, x : x + bw]
            assert torch.equal(got, apply_train(ref, size, (0, 0, bh, bw, flip)))
            assert psnr(got, exact) > CROP_PSNR_FLOOR_DB
            pairs.append((got.flatten(), exact.flatten()))
    assert seen == {1, 2, 4, 8}
    scaled, exact = (torch.cat(p) for p in zip(*pairs, strict=True))
    assert psnr(scaled, exact) > PSNR_FLOOR_DB


@needs_ext
def test_eval_decodes_the_centre_region_at_scale() -> None:
    """eval_sample: small images (region <= 2x the output) give eval_augment's exact pixels;
    large ones decode only the centre region at scale: the reference's pixels there, close to
    the exact transform (a wrong region would not be), and scaled=False keeps them exact."""
    from shard_writer.sample_data import render

    small = _jpeg(150, 97, "420", seed=2)
    assert torch.equal(eval_sample(small, 48), eval_augment(decode_rgb(small), 48))
    scales = set()
    for i, size in ((0, 64), (1, 100), (2, 200), (3, 400)):
        jpeg = render(2, i, 10, (900, 700))
        width, height = decode.header_size(jpeg)
        exact = eval_augment(decode_rgb(jpeg), size)
        assert torch.equal(eval_sample(jpeg, size, scaled=False), exact)
        box = eval_box(height, width, size)
        d = scale_for(box[2], box[3], size)
        scales.add(d)
        got = eval_sample(jpeg, size)
        if d == 1:
            assert torch.equal(got, exact)
            continue
        t, x, bh, bw = scaled_box(*box, d)
        ref = libjpeg_scaled(jpeg, d)[:, t : t + bh, x : x + bw]
        assert torch.equal(got, apply_train(ref, size, (0, 0, bh, bw, False)))
        assert psnr(got, exact) > PSNR_FLOOR_DB, (i, size, d)
    assert scales == {1, 2, 4, 8}


def test_eval_box_is_torchvisions_resize_and_centre_crop() -> None:
    """The region eval_box names, resized to size x size, is what Resize + CenterCrop give:
    checked on an image whose pixels are their own coordinates (smooth ramps)."""
    for height, width, size in ((97, 150, 16), (300, 200, 48), (640, 480, 224), (1200, 1600, 96)):
        ys = torch.linspace(0, 255, height).view(height, 1).expand(height, width)
        xs = torch.linspace(0, 255, width).view(1, width).expand(height, width)
        img = torch.stack([ys, xs, (ys + xs) / 2]).round().to(torch.uint8)
        top, left, h, w = eval_box(height, width, size)
        assert top >= 0 and top + h <= height + 1e-6 and left >= 0 and left + w <= width + 1e-6
        t, x = round(top), round(left)
        region = img[:, t : t + round(h), x : x + round(w)]
        got = apply_train(region, size, (0, 0, region.shape[1], region.shape[2], False))
        assert (got.int() - eval_augment(img, size).int()).abs().max() <= 3


@needs_ext
def test_what_the_partial_decoder_declines_is_decoded_whole_and_exactly() -> None:
    """CMYK, bytes after the end marker, libjpeg warnings: at any scale the partial decoder
    returns None, and the whole-image path decides (exact pixels, or the same error)."""
    cmyk = io.BytesIO()
    _noise(400, 300, 1).convert("CMYK").save(cmyk, "JPEG")
    params = (10, 20, 280, 360, True)
    for data in (cmyk.getvalue(), _jpeg(400, 300, "420") + b"\0" * 16):
        for scale in SCALES:
            assert decode_crop(data, 10, 20, 280, 360, scale=scale) is None
        exact = apply_train(decode_rgb(data), 32, params)
        assert torch.equal(decode_train(data, 32, params, scaled=True), exact)
    cut = _jpeg(400, 300, "420")[:-3000]
    for scaled in (True, False):
        with pytest.raises(SampleError, match="k3"):
            decode_train(cut, 32, (0, 0, 100, 100, False), scaled=scaled, where="k3")
        with pytest.raises(SampleError, match="k3"):
            eval_sample(cut, 32, scaled=scaled, where="k3")


@needs_ext
def test_mutated_files_at_scale_never_get_a_different_verdict() -> None:
    """Random byte edits at random rectangles and scales: decode_crop never raises, and
    whenever it returns pixels the whole-image decoder accepts the file."""
    rng = random.Random(77)
    outcomes = {"partial": 0, "whole": 0}
    for i in range(500):
        kind = rng.choice(sorted(KINDS))
        w, h = rng.randint(32, 160), rng.randint(32, 160)
        data = bytearray(_jpeg(w, h, kind, seed=i))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(2, len(data) - 2)
            if rng.random() < 0.6:
                data[at] = rng.randrange(256)
            else:
                del data[at : at + rng.randint(1, 12)]
        top, left = rng.randrange(h // 2), rng.randrange(w // 2)
        crop = decode_crop(bytes(data), top, left, h - top, w - left, scale=rng.choice(SCALES))
        if crop is None:
            outcomes["whole"] += 1
            continue
        outcomes["partial"] += 1
        decode_rgb(bytes(data), where=f"mutation {i}")  # must not raise
    assert min(outcomes.values()) > 50, outcomes


def test_a_bad_scale_is_refused() -> None:
    if decode._jpegcrop is None:
        pytest.skip("_jpegcrop not built")
    out = np.empty((4, 4, 3), np.uint8)
    with pytest.raises(ValueError, match="scale_denom"):
        decode._jpegcrop.decode_crop(_jpeg(32, 32, "420"), 0, 0, 4, 4, out, 3)


@pytest.fixture(scope="module")
def large_dataset(tmp_path_factory) -> Path:
    """10 JPEGs of about 300x260 (crops at 32 px are often more than twice the output)."""
    from shard_writer.pack import PackOptions, pack
    from shard_writer.sample_data import generate_sample_data

    root = tmp_path_factory.mktemp("large")
    generate_sample_data(root / "src", images=10, classes=2, seed=1, workers=1, size=(300, 260))
    pack(str(root / "src"), str(root / "shards"), PackOptions(workers=1, max_count=6))
    return root / "shards"


def _pixels(loader) -> list[torch.Tensor]:
    return [b["pixel_values"].clone() for b in loader]


@needs_ext
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_make_loader_scaled_decode_option(large_dataset: Path, monkeypatch, train: bool) -> None:
    """scaled_decode=False: exactly the whole-image decode's batches; the default: close to
    them (PSNR floor) and not identical (large regions were scaled); output="encoded" decoded
    by DeviceDecoder on the CPU with the same setting gives the very same pixels."""
    from loaders import DeviceDecoder, make_loader

    common = dict(image_size=32, num_workers=0, seed=3, train=train, pin_memory=False)
    scaled = _pixels(make_loader(large_dataset, 4, **common))
    exact = _pixels(make_loader(large_dataset, 4, scaled_decode=False, **common))
    monkeypatch.setattr(decode, "_jpegcrop", None)  # whole images: the exact reference
    whole = _pixels(make_loader(large_dataset, 4, **common))
    monkeypatch.undo()
    assert all(torch.equal(a, b) for a, b in zip(exact, whole, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(scaled, exact, strict=True))
    assert psnr(torch.cat(scaled), torch.cat(exact)) > PSNR_FLOOR_DB
    for flag, want in ((True, scaled), (False, exact)):
        enc = make_loader(large_dataset, 4, output="encoded", scaled_decode=flag, **common)
        decoder = DeviceDecoder(32, device="cpu", output="uint8", scaled_decode=flag)
        got = [decoder(b) for b in enc]
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
