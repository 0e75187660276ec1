"""Pillow's resize, computed by loaders/recipe/_pilresample.c: bit for bit Pillow's, for every
filter, both orders of the passes, one axis or both, upscaling and downscaling, and for a window
of the resize computed from only the part of the image it reads."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from loaders.recipe import resample

needs_ext = pytest.mark.skipif(not resample.exact_here(), reason="_pilresample not built here")


def pillow(arr: np.ndarray, size: tuple[int, int], name: str) -> np.ndarray:
    code = resample.FILTERS.get(name, resample.NEAREST)
    return np.asarray(Image.fromarray(arr).resize((size[1], size[0]), code))


@needs_ext
@pytest.mark.parametrize("name", sorted(resample.FILTERS))
def test_whole_resizes_are_pillows(name: str) -> None:
    rng = np.random.default_rng(sorted(resample.FILTERS).index(name))
    for trial in range(150):
        h, w = (int(v) for v in rng.integers(1, 260, 2))
        oh, ow = (int(v) for v in rng.integers(1, 260, 2))
        oh = h if trial % 7 == 0 else oh  # one axis only
        ow = w if trial % 11 == 0 else ow
        arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        got = resample.pil_resize(arr, (oh, ow), name)
        assert np.array_equal(got, pillow(arr, (oh, ow), name)), (h, w, oh, ow)


@needs_ext
def test_a_window_from_a_part_of_the_image_is_the_crop_of_the_whole_resize() -> None:
    rng = np.random.default_rng(9)
    names = sorted(resample.FILTERS)
    for trial in range(300):
        name = names[trial % len(names)]
        h, w = (int(v) for v in rng.integers(2, 260, 2))
        oh, ow = (int(v) for v in rng.integers(2, 260, 2))
        top, left = int(rng.integers(0, oh)), int(rng.integers(0, ow))
        box = (top, left, int(rng.integers(1, oh - top + 1)), int(rng.integers(1, ow - left + 1)))
        arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        want = pillow(arr, (oh, ow), name)[top : top + box[2], left : left + box[3]]
        t, x, sh, sw = resample.support((h, w), (oh, ow), name, box)
        assert t >= 0 and t + sh <= h and x >= 0 and x + sw <= w
        part = arr[t : t + sh, x : x + sw]
        got = resample.pil_resize(part, (oh, ow), name, window=box, source=(t, x, h, w))
        assert np.array_equal(got, want), (h, w, oh, ow, box, name)
        if sh > 1:  # a part that lacks a row the window reads is refused, not misread
            with pytest.raises(ValueError, match="lacks"):
                resample.pil_resize(part[1:], (oh, ow), name, window=box, source=(t + 1, x, h, w))


def test_without_the_compiled_resampler_pillow_resizes(monkeypatch) -> None:
    rng = np.random.default_rng(1)
    arr = rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)
    monkeypatch.setattr(resample, "_pilresample", None)
    resample.exact_here.cache_clear()
    try:
        assert not resample.exact_here() and not resample.windowed("bicubic")
        got = resample.pil_resize(arr, (20, 50), "bicubic", window=(2, 3, 10, 20))
        assert np.array_equal(got, pillow(arr, (20, 50), "bicubic")[2:12, 3:23])
        assert np.array_equal(
            resample.pil_resize(arr, (25, 25), "nearest"), pillow(arr, (25, 25), "nearest")
        )
    finally:
        resample.exact_here.cache_clear()
