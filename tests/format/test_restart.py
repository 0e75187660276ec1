"""Restart markers: the lossless transcode (wdstool/format/_jpegtran.c) and the region decode of
the intervals a crop covers (wdstool/format/_jpegcrop.c), against whole and partial decodes."""

from __future__ import annotations

import contextlib
import io
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import wdstool.format.decode as decode
import wdstool.format.restart as restart
from tests.support.jpegs import KINDS, jpeg, noise
from tests.support.mutate import mutate
from wdstool.base.errors import SampleError
from wdstool.format.decode import SCALES, decode_crop, decode_rgb, scaled_box
from wdstool.format.images import jpeg_exif_orientation

needs_ext = pytest.mark.skipif(
    decode._jpegcrop is None or not restart.available(),
    reason="the C extensions were not built (no C compiler or libjpeg-dev)",
)
pytestmark = needs_ext
PLAIN = sorted(set(KINDS) - {"restart-markers"})  # what the transcode is given


def marked(w: int, h: int, kind: str, target: int = 16, seed: int = 0) -> bytes:
    """The transcode itself (add_restarts would keep such small files when they grow)."""
    new, why = restart._jpegtran.restart(jpeg(w, h, kind, seed=seed), target)
    assert new is not None, why
    return new


def crop_of(data: bytes, left: int, top: int, w: int, h: int, scale: int, roi: bool) -> np.ndarray:
    out = np.zeros((h, w, 3), np.uint8)
    assert decode._jpegcrop.decode_crop(data, left, top, w, h, out, scale, roi)
    return out


@pytest.mark.parametrize("kind", PLAIN)
@pytest.mark.parametrize("size", [(1, 1), (17, 9), (97, 61), (160, 128), (333, 211)])
def test_the_transcode_keeps_every_pixel(kind: str, size: tuple[int, int]) -> None:
    """Every kind the encoders write (progressive becomes baseline), odd sizes: the marked file
    decodes to exactly the original's pixels with torchvision and with PIL, has intervals that
    never straddle an MCU row, and keeps its size within a few bytes per interval."""
    w, h = size
    original = jpeg(w, h, kind, seed=w + h)
    for target in (8, 32, 64, 4096):
        data = marked(w, h, kind, target, seed=w + h)
        layout = restart.restart_layout(data)
        assert layout is not None and layout.columns
        assert layout.per_row % layout.interval == 0
        assert torch.equal(decode_rgb(data), decode_rgb(original))
        pil = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in (data, original)]
        assert np.array_equal(*pil)


def test_the_interval_is_the_divisor_of_a_row_nearest_the_target() -> None:
    """4:2:0 (16-px MCUs): 1600 px = 100 MCUs a row -> 4 MCUs for 64 px; 97 MCUs (prime):
    1 MCU (16 px is nearer 64 px, by ratio, than 1,552 px)."""
    for w, expected in ((1600, 4), (1552, 1), (1920, 4), (480, 5)):
        data = marked(w, 32, "420", target=64)
        assert restart.restart_layout(data).interval == expected, w


def test_markers_and_metadata_are_kept() -> None:
    """EXIF (its orientation tag) and a comment survive the rewrite; a marked file is kept as
    it is the second time (it already has usable intervals)."""
    img = noise(64, 48, 1)
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, exif=exif, comment=b"kept")
    new, _ = restart._jpegtran.restart(buf.getvalue(), 64)
    assert jpeg_exif_orientation(new)[1] == 6
    assert Image.open(io.BytesIO(new)).info.get("comment") == b"kept"
    again = restart.add_restarts(new, (64, 48), min_pixels=0)
    assert again == (new, "already has restart intervals")


def test_what_is_kept_as_it_is_and_why() -> None:
    small = jpeg(64, 64, "420")
    assert restart.add_restarts(small, (64, 64)).kept == "under 1,000,000 pixels"
    # a file that grows with its markers (8-px intervals): a writer plans with the original's
    # size as a bound
    grey = jpeg(97, 61, "grey")
    got = restart.add_restarts(grey, (97, 61), target_width=8, min_pixels=0)
    assert got == (grey, "larger when rewritten")
    big = jpeg(1000, 1000, "420")
    new = restart.add_restarts(big, (1000, 1000))
    assert new.kept == "" and len(new.data) <= len(big)
    png = io.BytesIO()
    noise(8, 8, 0).save(png, "PNG")
    assert restart.add_restarts(png.getvalue(), (8, 8), min_pixels=0).kept == "not a JPEG"
    cmyk = io.BytesIO()
    noise(32, 32, 0).convert("CMYK").save(cmyk, "JPEG")
    got = restart.add_restarts(cmyk.getvalue(), (32, 32), min_pixels=0)
    assert got == (cmyk.getvalue(), "CMYK/YCCK colour")
    full = jpeg(96, 96, "420", seed=5)
    corrupt = full[: len(full) // 2] + bytes(40) + full[len(full) // 2 + 40 :]
    got = restart.add_restarts(corrupt, (96, 96), min_pixels=0)
    assert got.data == corrupt and got.kept.startswith(("corrupt data", "unreadable"))


@settings(max_examples=120, deadline=None)
@given(
    kind=st.sampled_from(PLAIN),
    w=st.integers(1, 300),
    h=st.integers(1, 300),
    target=st.sampled_from([8, 16, 32, 64]),
    scale=st.sampled_from((1, *SCALES)),
    data=st.data(),
)
def test_a_region_decode_equals_the_partial_decode(kind, w, h, target, scale, data) -> None:
    """Any rectangle of a marked file, at any scale, every chroma subsampling, odd sizes,
    interval sizes from one MCU up: the intervals that cover it decode to the partial decode's
    pixels (which are the whole decode's), bit for bit."""
    jpeg_ = marked(w, h, kind, target, seed=w * 301 + h)
    sw, sh = -(-w // scale), -(-h // scale)
    left, top = data.draw(st.integers(0, sw - 1)), data.draw(st.integers(0, sh - 1))
    cw, ch = data.draw(st.integers(1, sw - left)), data.draw(st.integers(1, sh - top))
    assert np.array_equal(
        crop_of(jpeg_, left, top, cw, ch, scale, True),
        crop_of(jpeg_, left, top, cw, ch, scale, False),
    )


@pytest.mark.parametrize("kind", PLAIN)
def test_crops_touching_every_edge_use_only_their_intervals(kind: str) -> None:
    """Corners, whole edges, one-pixel strips, the middle: the same pixels as a whole decode;
    the sub-JPEG of a small crop away from the top-left is much smaller than the file, is a
    JPEG PIL reads, and lies where the decoder says."""
    w, h = 250, 190
    data = marked(w, h, kind, 16, seed=7)
    whole = decode_rgb(data).permute(1, 2, 0).numpy()
    boxes = [
        (0, 0, 30, 20), (w - 30, 0, 30, 20), (0, h - 20, 30, 20), (w - 30, h - 20, 30, 20),
        (0, 0, w, 1), (0, h - 1, w, 1), (0, 0, 1, h), (w - 1, 0, 1, h), (100, 80, 40, 30),
        (0, 60, w, 50), (120, 0, 30, h), (w - 1, h - 1, 1, 1),
    ]  # fmt: skip
    for left, top, cw, ch in boxes:
        got = crop_of(data, left, top, cw, ch, 1, True)
        assert np.array_equal(got, whole[top : top + ch, left : left + cw]), (left, top, cw, ch)
    sub, dx, dy = decode._jpegcrop.sub_jpeg(data, 100, 80, 40, 30)
    assert len(sub) < len(data) / 3
    assert dx <= 100 - 8 and dy <= 80 - 8  # at least one MCU of margin
    with Image.open(io.BytesIO(sub)) as img:
        assert img.size[0] >= 40 + 16 and img.size[1] >= 30 + 16
        img.load()
    assert decode._jpegcrop.sub_jpeg(data, 0, 0, w, 40) is None  # the partial decode's case


def test_intervals_of_whole_rows_narrow_only_the_rows() -> None:
    """A file whose intervals are whole MCU rows (PIL's restart_marker_rows; cameras write
    such files): the decoder takes the rows a crop needs, all columns."""
    img = noise(200, 300, 2)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, restart_marker_rows=2)
    data = buf.getvalue()
    layout = restart.restart_layout(data)
    assert layout is not None and not layout.columns
    whole = decode_rgb(data).permute(1, 2, 0).numpy()
    for left, top, cw, ch, scale in (
        (30, 200, 50, 60, 1),
        (0, 100, 200, 20, 1),
        (10, 20, 10, 12, 2),
    ):
        got = crop_of(data, left, top, cw, ch, scale, True)
        assert np.array_equal(got, crop_of(data, left, top, cw, ch, scale, False))
        if scale == 1:
            assert np.array_equal(got, whole[top : top + ch, left : left + cw])
    sub, dx, dy = decode._jpegcrop.sub_jpeg(data, 30, 200, 50, 60)
    assert dx == 0 and dy > 0 and len(sub) < len(data) / 2


def test_broken_interval_structure_takes_the_usual_path() -> None:
    """A restart marker renumbered, removed, or a stray marker in the scan: the region decoder
    is not used, and the file gets the verdict the partial decoder gives it without
    intervals (the same pixels, or the same error through the whole decoder)."""
    data = marked(160, 160, "420", 16, seed=3)
    at = [i for i in range(len(data) - 1) if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7]
    assert len(at) > 50
    broken = {
        "renumbered": data[: at[20] + 1] + bytes([0xD0 + 5]) + data[at[20] + 2 :],
        "removed": data[: at[20]] + data[at[20] + 2 :],
        "stray": data[: at[20]] + b"\xff\xc4\x00\x02" + data[at[20] :],
    }
    for name, bad in broken.items():
        assert decode._jpegcrop.sub_jpeg(bad, 100, 100, 20, 20) is None, name
        try:
            expected = decode_rgb(bad)[:, 100:120, 100:120]
        except SampleError:
            assert decode_crop(bad, 100, 100, 20, 20) is None, name
            continue
        got = decode_crop(bad, 100, 100, 20, 20)
        assert got is None or torch.equal(got, expected), name


def test_damaged_files_never_get_a_different_verdict() -> None:
    """Random edits of marked files, crops in their lower right part (where the region
    decoder is used): whenever decode_crop returns pixels, the whole decoder accepts the file
    and has the same pixels there; it is used often, and declines often."""
    rng = random.Random(38)
    used = declined = 0
    for i in range(300):
        kind = rng.choice(PLAIN)
        w, h = rng.randint(64, 200), rng.randint(64, 200)
        data = bytearray(marked(w, h, kind, 16, seed=i))
        mutate(data, rng)
        top, left = rng.randrange(h // 2, h), rng.randrange(w // 2, w)
        ch, cw = rng.randint(1, h - top), rng.randint(1, w - left)
        with contextlib.suppress(ValueError):  # a broken header
            used += decode._jpegcrop.sub_jpeg(bytes(data), left, top, cw, ch) is not None
        crop = decode_crop(bytes(data), top, left, ch, cw)
        if crop is None:
            declined += 1
            continue
        whole = decode_rgb(bytes(data), where=f"mutation {i}")  # must not raise
        assert torch.equal(whole[:, top : top + ch, left : left + cw], crop), i
    assert used > 100 and declined > 30, (used, declined)


def test_scaled_boxes_of_a_marked_file_match_libjpegs_scaled_decode() -> None:
    """What the loader asks for on large images: a RandomResizedCrop-like box decoded at 1/2,
    1/4 and 1/8 through the intervals equals the partial decode's scaled pixels."""
    data = marked(900, 700, "420", 64, seed=11)
    rng = random.Random(5)
    for scale in SCALES:
        for _ in range(4):
            h, w = rng.randint(300, 690), rng.randint(300, 890)
            top, left = rng.randint(0, 700 - h), rng.randint(0, 900 - w)
            t, x, bh, bw = scaled_box(top, left, h, w, scale)
            roi = crop_of(data, x, t, bw, bh, scale, True)
            assert np.array_equal(roi, crop_of(data, x, t, bw, bh, scale, False))
