"""Recipes: a torchvision v2 pipeline split into a fused head and a seeded tail.

The oracle for the head's pixels is torchvision itself: each v2 op's own ``transform`` applied to
the whole decoded image with the parameters the head drew (``RandomResizedCrop.transform(img,
{top, left, height, width})``, ``Resize.transform``, ``CenterCrop.transform``,
``RandomCrop.transform``, the flips). Its draws are checked against torchvision's own
``make_params`` by distribution.
"""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.stats import ks_2samp
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode

import wdstool.format.decode as decode
from loaders.pool import new_batch
from loaders.recipe import Seeder, Where, build_recipe
from loaders.recipe.geometry import Geometry, RandomResizedCropHead, resized_size
from loaders.recipe.parts import flatten
from tests.support.jpegs import image_matrix
from wdstool.base.errors import ConfigError
from wdstool.format.decode import decode_rgb

BICUBIC, BILINEAR = InterpolationMode.BICUBIC, InterpolationMode.BILINEAR
needs_ext = pytest.mark.skipif(decode._jpegcrop is None, reason="_jpegcrop not built")
SEEDER = Seeder(Where.MAIN, opaque=False)

PIPELINES = {
    "rrc-bilinear": [v2.RandomResizedCrop(24), v2.RandomHorizontalFlip()],
    "rrc-bicubic-hw-flips": [
        v2.RandomResizedCrop((20, 28), scale=(0.25, 1), interpolation=BICUBIC),
        v2.RandomHorizontalFlip(0.5),
        v2.RandomVerticalFlip(0.5),
    ],
    "rrc-nearest": [v2.RandomResizedCrop(16, interpolation=InterpolationMode.NEAREST)],
    "rrc-bilinear-no-antialias": [v2.RandomResizedCrop(16, antialias=False)],
    "eval-bicubic-crop-pct": [v2.Resize(int(24 / 0.95), interpolation=BICUBIC), v2.CenterCrop(24)],
    "eval-hw": [v2.Resize((30, 44)), v2.CenterCrop((24, 32))],
    "resize-max-size": [v2.Resize(20, max_size=30), v2.CenterCrop(18)],
    "resize-random-crop": [v2.Resize(30, interpolation=BICUBIC), v2.RandomCrop(24)],
    "center-crop": [v2.CenterCrop((20, 26))],
    "center-crop-padded": [v2.CenterCrop(90)],
    "random-crop": [v2.RandomCrop(16), v2.RandomHorizontalFlip()],
    "random-interpolation": [
        v2.RandomChoice(
            [v2.RandomResizedCrop(24, interpolation=m) for m in (BILINEAR, BICUBIC)], p=[1, 3]
        ),
        v2.RandomHorizontalFlip(),
    ],
}


def oracle(ops: list, img: torch.Tensor, g: Geometry) -> torch.Tensor:
    """torchvision's own ops on the whole image with the parameters ``g`` holds."""
    box = dict(top=g.top, left=g.left, height=g.height, width=g.width)
    for op in ops:
        kind = type(op)
        if kind is v2.RandomResizedCrop:
            img = op.transform(img, box)
        elif kind is v2.RandomCrop:
            img = op.transform(img, dict(box, needs_crop=True, needs_pad=False, padding=[0] * 4))
        elif kind in (v2.Resize, v2.CenterCrop):
            img = op.transform(img, {})
        elif kind is v2.RandomChoice:  # the option with the interpolation the head chose
            (chosen,) = [t for t in op.transforms if t.interpolation.value == g.interpolation]
            img = oracle(list(flatten(chosen, v2.Compose)), img, g)
        elif (kind is v2.RandomHorizontalFlip and g.hflip) or (
            kind is v2.RandomVerticalFlip and g.vflip
        ):
            img = op.transform(img, {})
    return img


IMAGES = image_matrix(((67, 45), (40, 71)))


@needs_ext
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_fused_pixels_are_torchvisions_bit_for_bit(name: str) -> None:
    """scaled_decode=False: every JPEG kind (region decoded) and PNG/WebP (decoded whole), into a
    plain or channels-last slot, equal torchvision's pipeline on the whole image."""
    ops = PIPELINES[name]
    recipe = build_recipe(v2.Compose(ops))
    assert recipe.fused and not recipe.tail
    for i, data in enumerate(IMAGES):
        whole = decode_rgb(data)
        for seed in range(6):
            rng = random.Random(seed * 100 + i)
            g = recipe.head.draw(whole.shape[1], whole.shape[2], random.Random(seed * 100 + i))
            want = oracle(ops, whole, g)
            slot = new_batch(1, tuple(want.shape[-2:]), False, torch.uint8, seed % 2 == 1)[0]
            got = recipe(data, rng, SEEDER, slot, scaled=False)
            assert torch.equal(got, want), (name, i, seed, g)


@needs_ext
def test_the_partial_decode_is_used_and_declined_files_are_decoded_whole(monkeypatch) -> None:
    """The fused head decodes only the region (decode_crop is called with it); where the
    partial decoder is absent the pixels are the same."""
    recipe = build_recipe(v2.Compose(PIPELINES["rrc-bicubic-hw-flips"]))
    data = IMAGES[0]
    calls = []
    real = decode.decode_crop

    def spy(*args, **kw):
        calls.append(args[1:5])
        return real(*args, **kw)

    monkeypatch.setattr("loaders.recipe.region_decode.decode_crop", spy)
    fused = recipe(data, random.Random(1), SEEDER, scaled=False)
    assert len(calls) == 1
    monkeypatch.setattr(decode, "_jpegcrop", None)
    assert torch.equal(recipe(data, random.Random(1), SEEDER, scaled=False), fused)


def _draws(n: int, height: int, width: int, ours: bool) -> np.ndarray:
    """(area share, log aspect, top share, left share) of n RandomResizedCrop draws."""
    rrc = v2.RandomResizedCrop(32)
    head = RandomResizedCropHead((32, 32))
    rng, img = random.Random(7), torch.empty(3, height, width, dtype=torch.uint8)
    torch.manual_seed(7)
    rows = []
    for _ in range(n):
        if ours:
            g = head.draw(height, width, rng)
            t, left, h, w = g.top, g.left, g.height, g.width
        else:
            p = rrc.make_params([img])
            t, left, h, w = p["top"], p["left"], p["height"], p["width"]
        rows.append((h * w / (height * width), np.log(w / h), t / height, left / width))
    return np.array(rows)


@pytest.mark.parametrize(("height", "width"), [(375, 500), (40, 900)])
def test_crop_parameters_have_torchvisions_distribution(height: int, width: int) -> None:
    """Scale, aspect and position of our RandomResizedCrop draws against torchvision's
    make_params (a wide image exercises the ten tries and the central fallback)."""
    ours, theirs = _draws(3000, height, width, True), _draws(3000, height, width, False)
    for column in range(4):
        assert ks_2samp(ours[:, column], theirs[:, column]).statistic < 0.05, column


def test_flip_and_choice_probabilities() -> None:
    recipe = build_recipe(
        v2.Compose(
            [
                v2.RandomChoice([v2.CenterCrop(8), v2.RandomCrop(8)], p=[1, 3]),
                v2.RandomHorizontalFlip(0.3),
                v2.RandomVerticalFlip(0.8),
            ]
        )
    )
    rng, n = random.Random(3), 4000
    draws = [recipe.head.draw(40, 60, rng) for _ in range(n)]
    for share, p in (
        (sum(g.hflip for g in draws) / n, 0.3),
        (sum(g.vflip for g in draws) / n, 0.8),
        (sum((g.top, g.left) != (16, 26) for g in draws) / n, 0.75),  # RandomCrop chosen
    ):
        assert abs(share - p) < 4 * (p * (1 - p) / n) ** 0.5


@pytest.mark.parametrize(
    ("size", "max_size"), [([224], None), ([256], 300), ([100, 50], None), (None, 120)]
)
def test_resized_size_is_torchvisions(size, max_size) -> None:
    from torchvision.transforms.v2.functional._geometry import _compute_resized_output_size

    for h, w in ((480, 640), (640, 480), (333, 333), (17, 1000)):
        want = tuple(_compute_resized_output_size((h, w), size, max_size))
        assert resized_size(h, w, size, max_size) == want


def test_the_split_of_a_real_recipe() -> None:
    """DeiT's recipe: the crop and flip fused, the rest in the workers; no-op conversions
    skipped; the description says both."""
    recipe = build_recipe(
        v2.Compose(
            [
                v2.ToImage(),
                v2.Compose([v2.RandomResizedCrop(224, interpolation=BICUBIC)]),
                v2.RandomHorizontalFlip(),
                v2.RandAugment(2, 9),
                v2.RandomErasing(0.25),
            ]
        )
    )
    assert recipe.fused and recipe.size == (224, 224) and recipe.dtype == torch.uint8
    assert [type(op).__name__ for op in recipe.tail] == ["RandAugment", "RandomErasing"]
    line = str(recipe)
    assert "RandomResizedCrop(224, bicubic) + RandomHorizontalFlip(0.5)" in line
    assert "in the workers on the crop: RandAugment, RandomErasing" in line
    stopped = build_recipe(v2.Compose([v2.RandomRotation(10), v2.CenterCrop(8)]))
    assert not stopped.fused and "RandomRotation comes first" in str(stopped)

    # a subclass may draw differently: it is not fused
    class MyCrop(v2.RandomResizedCrop):
        pass

    assert not build_recipe(MyCrop(8)).fused


def test_bad_pipelines_are_one_line_config_errors() -> None:
    with pytest.raises(ConfigError, match="not callable"):
        build_recipe(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"image_size=32 but .*outputs 24x24"):
        build_recipe(v2.RandomResizedCrop(24), image_size=32)
    to_float = v2.Compose(
        [
            v2.RandomResizedCrop(24),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.5] * 3, [0.2] * 3),
        ]
    )
    with pytest.raises(ConfigError, match="output='float'"):
        build_recipe(to_float, output="uint8")
    assert build_recipe(to_float, output="float").dtype == torch.float32
    assert build_recipe(to_float).dtype == torch.float32  # output="auto" follows it
    # ops that fail on the grey probe image: each sample is checked when it runs
    assert build_recipe(v2.Compose([v2.RandomResizedCrop(24), v2.Lambda(_raise)])).size == (24, 24)
    with pytest.raises(ConfigError, match="returned str"):
        build_recipe(v2.Compose([v2.RandomResizedCrop(24), v2.Lambda(str)]))
    with pytest.raises(ConfigError, match="image_size"):
        build_recipe(None, image_size=(3, 4, 5))  # type: ignore[arg-type]


def _raise(_img: torch.Tensor) -> torch.Tensor:
    raise ValueError("no")


def test_built_in_recipes_take_any_size() -> None:
    data = IMAGES[0]
    for size, train in (((20, 30), True), ((20, 30), False), (16, True)):
        recipe = build_recipe(None, train=train, image_size=size)
        got = recipe(data, random.Random(0), SEEDER)
        assert tuple(got.shape) == (3, *((size, size) if isinstance(size, int) else size))
    assert str(build_recipe(None, train=False)).startswith("built-in eval recipe")


def test_a_tail_is_seeded_per_sample_and_leaves_the_callers_generator_alone() -> None:
    """The same seed gives the same pixels whoever runs the tail (the training process, a
    worker process, a decode thread); the training process's generator is restored."""
    recipe = build_recipe(
        v2.Compose([v2.RandomResizedCrop(32), v2.TrivialAugmentWide(), v2.RandomErasing(0.9)])
    )
    data = IMAGES[1]
    torch.manual_seed(123)
    before = torch.get_rng_state()
    main = [recipe(data, random.Random(s), Seeder(Where.MAIN, False)) for s in range(8)]
    assert torch.equal(torch.get_rng_state(), before)
    worker = [recipe(data, random.Random(s), Seeder(Where.WORKER, False)) for s in range(8)]
    thread = [recipe(data, random.Random(s), Seeder(Where.THREAD, False)) for s in range(8)]
    assert all(
        torch.equal(a, b) and torch.equal(a, c)
        for a, b, c in zip(main, worker, thread, strict=True)
    )
    assert len({bytes(t.numpy()) for t in main}) == 8  # another sample, other draws


@needs_ext
def test_scaled_decode_of_large_images_stays_close(tmp_path) -> None:
    """With scaled_decode (the default) a bicubic crop or eval region more than twice the output
    is decoded at a reduced scale: close to the exact pixels (PSNR over all samples)."""
    from shard_writer.sample_data import generate_sample_data
    from tests.loaders.recipe.test_scaled_decode import PSNR_FLOOR_DB, psnr

    generate_sample_data(tmp_path, images=6, classes=1, seed=2, workers=1, size=(800, 600))
    datas = [p.read_bytes() for p in sorted(tmp_path.rglob("*.jpg"))]
    for ops in (PIPELINES["random-interpolation"], PIPELINES["eval-bicubic-crop-pct"]):
        recipe = build_recipe(v2.Compose(ops))
        pairs = [
            (recipe(d, random.Random(s), SEEDER), recipe(d, random.Random(s), SEEDER, scaled=False))
            for d in datas
            for s in range(4)
        ]
        scaled, exact = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
        assert not torch.equal(scaled, exact)
        assert psnr(scaled, exact) > PSNR_FLOOR_DB


def test_pil_images_of_other_modes_are_rgb() -> None:
    """A palette PNG goes the whole-decode way and comes out as 3 channels."""
    buf = io.BytesIO()
    Image.new("P", (30, 20), 3).save(buf, "PNG")
    got = build_recipe(v2.CenterCrop(10))(buf.getvalue(), random.Random(0), SEEDER)
    assert got.shape == (3, 10, 10)


@pytest.mark.parametrize("size", [4, (224, 7), True, (224, 224.0), "224"])
def test_a_fixed_image_size_is_an_int_or_pair_of_at_least_8(size: object) -> None:
    """One parser for every size setting: fixed recipes, schedules and the device decoder."""
    from loaders.device import DeviceDecoder

    with pytest.raises(ConfigError, match="image_size"):
        build_recipe(None, train=True, image_size=size)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="image_size"):
        DeviceDecoder(image_size=size, device="cpu")  # type: ignore[arg-type]
    assert build_recipe(None, train=True, image_size=(8, 12)).size == (8, 12)
