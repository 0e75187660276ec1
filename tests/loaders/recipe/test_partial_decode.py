"""Partial JPEG decode (wdstool/format/_jpegcrop.c): the pixels of a whole-image decode, for every
kind of JPEG the encoders here write, and the same verdict on broken files."""

from __future__ import annotations

import io
import os
import random
import shutil
import sysconfig
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import wdstool.format.decode as decode
from loaders.recipe.builtin import (
    apply_train,
    decode_train,
    train_augment,
    train_params,
    train_sample,
)
from tests.support.jpegs import KINDS
from tests.support.jpegs import jpeg as _jpeg
from tests.support.jpegs import noise as _noise
from tests.support.mutate import mutate
from wdstool.base.errors import SampleError
from wdstool.format.decode import decode_crop, decode_rgb, header_size

needs_ext = pytest.mark.skipif(
    decode._jpegcrop is None,
    reason="wdstool/format/_jpegcrop not built (no C compiler or libjpeg-dev)",
)


def test_the_partial_decoder_is_built_where_it_can_be() -> None:
    """Where a compiler, Python's and libjpeg's headers are present (this project's CI), a
    failed build must not pass unnoticed as a silent fallback."""
    include = Path(sysconfig.get_paths()["include"])
    can = shutil.which("cc") and (include / "Python.h").exists()
    can = can and any(Path(p, "jpeglib.h").exists() for p in ("/usr/include", "/usr/local/include"))
    if not can:
        pytest.skip("no C compiler or headers here")
    assert decode._jpegcrop is not None
    assert decode.PARTIAL_DECODE or os.environ.get("WDSTOOL_PARTIAL_DECODE") == "0"


@needs_ext
@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(sorted(KINDS)),
    w=st.integers(1, 160),
    h=st.integers(1, 160),
    data=st.data(),
)
def test_any_rectangle_has_the_whole_decode_pixels(kind: str, w: int, h: int, data) -> None:
    jpeg = _jpeg(w, h, kind, seed=w * 1000 + h)
    left = data.draw(st.integers(0, w - 1))
    top = data.draw(st.integers(0, h - 1))
    cw = data.draw(st.integers(1, w - left))
    ch = data.draw(st.integers(1, h - top))
    crop = decode_crop(jpeg, top, left, ch, cw)
    assert crop is not None
    assert torch.equal(crop, decode_rgb(jpeg)[:, top : top + ch, left : left + cw])


@needs_ext
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_train_augmentation_is_unchanged(kind: str) -> None:
    """decode_train with partial decode == the whole-image path, into a batch slot, flipped or
    not, over many RandomResizedCrop draws on photo-sized images (scaled=False: large crops
    keep the exact pixels; tests/loaders/recipe/test_scaled_decode.py covers the scaled ones)."""
    jpeg = _jpeg(331, 247, kind, seed=7)
    whole = decode_rgb(jpeg)
    rng = random.Random(kind)
    for _ in range(25):
        params = train_params(*header_size(jpeg)[::-1], rng)
        slot = torch.empty((3, 64, 64), dtype=torch.uint8)
        got = decode_train(jpeg, 64, params, slot, partial=True, scaled=False)
        assert got.data_ptr() == slot.data_ptr()
        assert torch.equal(got, apply_train(whole, 64, params))


@needs_ext
def test_images_it_does_not_handle_are_decoded_whole() -> None:
    cmyk = io.BytesIO()
    _noise(50, 40, 1).convert("CMYK").save(cmyk, "JPEG")
    data = cmyk.getvalue()
    assert decode_crop(data, 5, 5, 20, 20) is None
    params = (5, 5, 20, 20, True)
    assert torch.equal(decode_train(data, 16, params), apply_train(decode_rgb(data), 16, params))
    # bytes after the end-of-image marker: whole decode (it accepts them)
    padded = _jpeg(50, 40, "420") + b"\0" * 16
    assert decode_crop(padded, 0, 0, 8, 8) is None
    assert decode_train(padded, 16, params).shape == (3, 16, 16)


@needs_ext
@pytest.mark.parametrize("cut_at", [0.2, 0.5, 0.9])
def test_a_truncated_file_is_rejected_wherever_the_crop_lies(cut_at: float) -> None:
    """The whole-image decoder rejects a truncated file; so does decode_train, even for a crop
    entirely above the cut (which the partial decoder alone would decode)."""
    full = _jpeg(120, 200, "420")
    cut = full[: int(len(full) * cut_at)]
    with pytest.raises(SampleError, match="k7"):
        decode_rgb(cut, where="k7")
    for params in ((0, 0, 10, 10, False), (150, 50, 40, 60, True)):
        with pytest.raises(SampleError, match="k7"):
            decode_train(cut, 16, params, where="k7")


@needs_ext
@pytest.mark.parametrize("scaled", [False, True], ids=["exact", "scaled"])
def test_corrupt_entropy_data_gets_the_whole_decoders_verdict(scaled: bool) -> None:
    """Garbage inside the scan: libjpeg warns or fails; either way the whole-image decoder
    decides (same pixels or same error), never a made-up partial result. Also for a crop
    decoded at 1/2 scale (90 > 2 x 32): the same verdicts."""
    full = _jpeg(120, 120, "420", seed=3)
    rng = random.Random(3)
    verdicts = set()
    junks = (b"\xff\x00\x13", bytes(3), b"\xff\xd9", b"\xff\xc0\x00\x02", b"\xff\xda\x00\x02")
    for junk in junks * 3:
        at = rng.randrange(len(full) // 3, len(full) - 8)
        data = full[:at] + junk + full[at + len(junk) :]
        params = (10, 10, 90, 90, False)
        try:
            expected = apply_train(decode_rgb(data), 32, params)
        except SampleError:
            verdicts.add("rejected")
            with pytest.raises(SampleError):
                decode_train(data, 32, params, scaled=scaled)
            continue
        verdicts.add("decoded")
        got = decode_train(data, 32, params, scaled=scaled)
        assert scaled or torch.equal(got, expected)
    assert verdicts == {"rejected", "decoded"}


@needs_ext
@pytest.mark.skipif(not decode.PARTIAL_DECODE, reason="WDSTOOL_PARTIAL_DECODE=0")
def test_the_loader_decodes_only_crops(uneven_dataset: Path, monkeypatch) -> None:
    """In the loader's train path every JPEG goes through the partial decoder (num_workers=0,
    so the counting shim is in this process), and the batches equal the whole-image ones."""
    from loaders import make_loader

    calls = []
    real = decode._jpegcrop

    class Counting:
        def decode_crop(self, *args):
            calls.append(args[1:5])
            return real.decode_crop(*args)

    def epoch() -> list[torch.Tensor]:
        loader = make_loader(str(uneven_dataset), 4, image_size=32, num_workers=0, seed=5)
        return [b["pixel_values"] for b in loader]

    monkeypatch.setattr(decode, "_jpegcrop", Counting())
    partial = epoch()
    assert calls and len(calls) == sum(len(b) for b in partial)
    monkeypatch.setattr(decode, "_jpegcrop", None)
    whole = epoch()
    assert len(whole) == len(partial)
    assert all(torch.equal(a, b) for a, b in zip(partial, whole, strict=True))


@needs_ext
def test_photographs_at_every_setting() -> None:
    """The installed packages' photographs (what `wdstool sample-data` renders from), encoded
    at several qualities, subsamplings and progressive: 200 RandomResizedCrop draws, equal."""
    from shard_writer.sample_data import source_photos

    rng = random.Random(11)
    photos = source_photos()
    for i in range(40):
        _name, photo = photos[i % len(photos)]
        buf = io.BytesIO()
        options = {"quality": rng.choice((50, 75, 95)), "subsampling": rng.choice((0, 1, 2))}
        photo.save(buf, "JPEG", progressive=rng.random() < 0.3, **options)
        jpeg = buf.getvalue()
        whole = decode_rgb(jpeg)
        for _ in range(5):
            params = train_params(whole.shape[1], whole.shape[2], rng)
            top, left, h, w, _flip = params
            crop = decode_crop(jpeg, top, left, h, w)
            assert crop is not None
            assert torch.equal(crop, whole[:, top : top + h, left : left + w]), (i, options)


@needs_ext
def test_mutated_files_never_get_a_different_verdict() -> None:
    """Random byte edits, deletions and insertions anywhere after the SOI marker, at random
    rectangles: decode_crop never raises, and whenever it returns pixels the whole-image decoder
    accepts the file and has the same pixels there. (Before the stray-marker check, ~0.3% of
    such files were rejected whole but decoded partially: a bad marker below the crop.)"""
    rng = random.Random(2026)
    outcomes = {"partial": 0, "whole": 0}
    for i in range(800):
        kind = rng.choice(sorted(KINDS))
        w, h = rng.randint(8, 96), rng.randint(8, 96)
        data = bytearray(_jpeg(w, h, kind, seed=i))
        mutate(data, rng)
        top, left = rng.randrange(h), rng.randrange(w)
        ch, cw = rng.randint(1, h - top), rng.randint(1, w - left)
        crop = decode_crop(bytes(data), top, left, ch, cw)
        if crop is None:
            outcomes["whole"] += 1
            continue
        outcomes["partial"] += 1
        whole = decode_rgb(bytes(data), where=f"mutation {i}")  # must not raise
        assert torch.equal(whole[:, top : top + ch, left : left + cw], crop), i
    assert min(outcomes.values()) > 100, outcomes


@needs_ext
def test_train_sample_draws_and_pixels_match_the_whole_path() -> None:
    """train_sample (what the loader, the ceiling and webdataset-fast run) == train_augment of
    the whole decode: same RNG draws, same pixels; PNGs go the whole way."""
    png = io.BytesIO()
    _noise(90, 70, 4).save(png, "PNG")
    for data in (_jpeg(150, 110, "420", seed=4), _jpeg(150, 110, "progressive"), png.getvalue()):
        a, b = random.Random(9), random.Random(9)
        for _ in range(10):
            got = train_sample(data, 48, a, partial=True, scaled=False)
            assert torch.equal(got, train_augment(decode_rgb(data), 48, b))
        assert a.random() == b.random()  # the same number of draws
