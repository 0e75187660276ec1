"""Recipes written with torchvision v1, timm and albumentations: split by their library's adapter.

The oracle is always the library itself: the user's own pipeline run on the whole decoded image
(a PIL image where the pipeline was written for PIL, an HWC array for albumentations), with the
generators the loader seeds per sample seeded the same way. The fused recipe decodes only the
region and must give the same pixels bit for bit (``scaled=False``), its tail included: the
draws are the library's own, made in the library's order.
"""

from __future__ import annotations

import random

import albumentations as A
import cv2
import numpy as np
import pytest
import torch
from PIL import Image, ImageOps
from scipy.stats import ks_2samp
from timm.data import auto_augment as aa
from timm.data import create_transform
from timm.data import transforms as tt
from torchvision import transforms as T
from torchvision.transforms import v2

import wdstool.format.decode as decode
from loaders.recipe import Seeder, Where, build_recipe
from loaders.recipe.albu import sample_seed, seed_compose
from loaders.recipe.imagetypes import Kind, as_tensor, to_hwc, to_pil
from loaders.recipe.timm_ops import pillow_refuses_zero_bits, with_posterize_fix
from tests.support.jpegs import image_matrix
from wdstool.base.errors import ConfigError
from wdstool.format.decode import decode_rgb

needs_ext = pytest.mark.skipif(decode._jpegcrop is None, reason="_jpegcrop not built")
SEEDER = Seeder(Where.MAIN, opaque=True)
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
IM = T.InterpolationMode


IMAGES = image_matrix(((67, 45), (40, 71), (150, 112)))

V1 = {
    "tutorial": T.Compose(
        [T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]
    ),
    "eval": T.Compose([T.Resize(45), T.CenterCrop(40), T.ToTensor(), T.Normalize(MEAN, STD)]),
    "eval-hw-bicubic": T.Compose(
        [T.Resize((50, 36), interpolation=IM.BICUBIC), T.CenterCrop((40, 30)), T.PILToTensor()]
    ),
    "resize-max-size-random-crop": T.Compose(
        [T.Resize(30, max_size=50), T.RandomCrop(24), T.RandomVerticalFlip(), T.ToTensor()]
    ),
    "center-crop-padded": T.Compose([T.CenterCrop(90), T.PILToTensor()]),
    "random-crop-lanczos-tail": T.Compose(
        [
            T.RandomResizedCrop((24, 36), scale=(0.3, 1), interpolation=IM.LANCZOS),
            T.RandomHorizontalFlip(0.3),
            T.ColorJitter(0.4, 0.4, 0.4, 0.1),
            T.RandomGrayscale(0.2),
            T.PILToTensor(),
        ]
    ),
    # no ToTensor anywhere: written for tensors (read_image), v1's tensor pixels
    "tensors": T.Compose(
        [
            T.RandomResizedCrop(32, interpolation=IM.BICUBIC),
            T.RandomHorizontalFlip(),
            T.RandAugment(),
            T.RandomErasing(0.5),
        ]
    ),
    "tensors-resize": T.Compose([T.Resize(40, antialias=True), T.RandomCrop(32)]),
}

TIMM = {
    "train-rand-inc1-random-interp-re": create_transform(
        40,
        is_training=True,
        auto_augment="rand-m9-mstd0.5-inc1",
        interpolation="random",
        re_prob=0.5,
    ),
    "train-prefetcher": create_transform(
        40, is_training=True, auto_augment="rand-m7-n3-mstd1", use_prefetcher=True
    ),
    "train-augmix-pixel-re-vflip": create_transform(
        (32, 40),
        is_training=True,
        auto_augment="augmix-m5-w4-d2",
        vflip=0.5,
        re_prob=0.6,
        re_mode="pixel",
        re_count=2,
    ),
    "train-original-aa-jitter": create_transform(
        40, is_training=True, auto_augment="v0", scale=(0.2, 1), ratio=(0.5, 2)
    ),
    "train-color-jitter": create_transform(
        40, is_training=True, color_jitter=0.4, interpolation="bicubic"
    ),
    "eval-crop-pct": create_transform(40, crop_pct=0.95, interpolation="bicubic"),
    "eval-hw-keep-ratio": create_transform((32, 48), crop_pct=0.9),
    "eval-squash": create_transform(40, crop_pct=0.9, crop_mode="squash"),
    "eval-prefetcher": create_transform(40, use_prefetcher=True),
}


def oracle(transform, data: bytes, kind: Kind, seed: int) -> torch.Tensor:
    """The library's own pipeline on the whole decoded image, its generators seeded as the
    loader seeds a sample's."""
    whole = decode_rgb(data)
    if kind is Kind.PIL:
        img = to_pil(whole)
    elif kind is Kind.NUMPY:
        img = to_hwc(whole)
    else:
        img = whole
    return as_tensor(SEEDER(transform, img, seed))


def _check_exact(transform, pipelines_oracle=None, seeds: int = 4) -> None:
    recipe = build_recipe(transform, output="auto")
    assert recipe.fused, str(recipe)
    reference = pipelines_oracle or transform
    for i, data in enumerate(IMAGES):
        for s in range(seeds):
            seed = random.Random(s * 1000 + i).getrandbits(63)
            want = oracle(reference, data, recipe.kind, seed)
            got = recipe(data, random.Random(s * 1000 + i), SEEDER, scaled=False)
            assert got.dtype == want.dtype and torch.equal(got, want), (i, s)


@needs_ext
@pytest.mark.parametrize("name", sorted(V1))
def test_v1_pipelines_are_v1_bit_for_bit(name: str) -> None:
    """Every JPEG kind (region decoded), PNG and WebP (whole): the v1 pipeline's own pixels,
    on PIL images where it was written for them (ToTensor/PILToTensor), on tensors otherwise."""
    _check_exact(V1[name])


def test_the_image_type_is_the_pipelines() -> None:
    assert build_recipe(V1["tutorial"], output="auto").kind is Kind.PIL
    assert build_recipe(V1["tensors"]).kind is Kind.TENSOR
    leading = build_recipe(T.Compose([T.PILToTensor(), T.RandomResizedCrop(24)]))
    assert leading.fused and leading.kind is Kind.TENSOR


@needs_ext
@pytest.mark.parametrize("name", sorted(TIMM))
def test_timm_transforms_are_timms_bit_for_bit(name: str) -> None:
    """What create_transform returns, train (RandAugment/AugMix/AutoAugment, color jitter,
    random interpolation, RandomErasing on the normalized tensor, the prefetcher's uint8) and
    eval (crop_pct, ResizeKeepRatio for (h, w), squash): timm's pixels for the same seeds."""
    tf = TIMM[name]
    _check_exact(tf, with_posterize_fix(tf))


@needs_ext
def test_albumentations_pipelines_are_albumentations_bit_for_bit() -> None:
    fused = A.Compose(
        [
            A.RandomResizedCrop(size=(40, 40), scale=(0.1, 1.0), interpolation=cv2.INTER_CUBIC),
            A.HorizontalFlip(p=0.5),
            A.ColorJitter(p=0.5),
            A.Normalize(),
            A.ToTensorV2(),
        ]
    )
    whole = A.Compose([A.SmallestMaxSize(max_size=48), A.CenterCrop(40, 40), A.ToTensorV2()])

    def albu(compose):
        def run(img):
            return seed_compose(compose, sample_seed())(image=img)["image"]

        return run

    _check_exact(fused, albu(fused))
    recipe = build_recipe(whole)
    assert not recipe.fused and recipe.kind is Kind.NUMPY and recipe.size == (40, 40)
    for i, data in enumerate(IMAGES[:6]):
        seed = random.Random(i).getrandbits(63)
        got = recipe(data, random.Random(i), SEEDER)
        assert torch.equal(got, oracle(albu(whole), data, Kind.NUMPY, seed))


def test_the_recipe_names_the_library_and_what_was_fused() -> None:
    line = str(build_recipe(TIMM["train-rand-inc1-random-interp-re"]))
    assert line.startswith("timm pipeline, fused into the decoder: RandomResizedCropAnd")
    assert "interpolation=bilinear bicubic" in line and "PIL's pixels" in line
    assert "then in the workers on the crop: RandAugment, MaybeToTensor + Normalize" in line
    assert str(build_recipe(V1["tutorial"])).startswith("torchvision v1 pipeline, fused")
    stopped = build_recipe(T.Compose([T.ColorJitter(0.2), T.RandomResizedCrop(8), T.ToTensor()]))
    assert not stopped.fused and stopped.kind is Kind.PIL
    assert "not fused (ColorJitter comes first)" in str(stopped)
    assert "as PIL images" in str(stopped)


def _boxes(n: int, ours: bool) -> np.ndarray:
    """(area share, log aspect, top share) of n timm RandomResizedCrop draws on a 375x500
    image: ours from per-sample seeds as the loader makes them, timm's from one stream."""
    op = tt.RandomResizedCropAndInterpolation(32, interpolation="random")
    recipe = build_recipe(T.Compose([op]))
    img, rows = torch.empty((3, 375, 500), device="meta"), []
    random.seed(11)
    for i in range(n):
        if ours:
            seed = random.Random(i).getrandbits(63)
            g = SEEDER.staged(seed, lambda: recipe.head.draw(375, 500), None, lambda g: g)
            t, h, w, interp = g.top, g.height, g.width, g.interpolation
        else:
            t, _l, h, w = op.get_params(img, op.scale, op.ratio)
            interp = random.choice(op.interpolation).value
        rows.append((h * w / (375 * 500), np.log(w / h), t / 375, interp == "bicubic"))
    return np.array(rows)


def test_per_sample_seeding_keeps_timms_distributions() -> None:
    """Crops drawn from one seed per sample have the distribution of timm's own stream; the
    interpolation is bicubic half of the time."""
    ours, theirs = _boxes(3000, True), _boxes(3000, False)
    for column in range(3):
        assert ks_2samp(ours[:, column], theirs[:, column]).statistic < 0.05, column
    assert abs(ours[:, 3].mean() - 0.5) < 4 * (0.25 / 3000) ** 0.5


@pytest.mark.skipif(not pillow_refuses_zero_bits(), reason="this Pillow posterizes to 0 bits")
def test_timm_posterize_at_zero_bits_is_pillow_12s_black() -> None:
    """timm's increasing posterize at magnitude 10 asks Pillow for 0 bits, which Pillow 13
    refuses; the loader's copy of the pipeline gives Pillow 12's black image, and leaves the
    user's objects alone."""
    ra = aa.RandAugment([aa.AugmentOp("PosterizeIncreasing", prob=1.0, magnitude=10)], 1)
    pipeline = T.Compose([tt.RandomResizedCropAndInterpolation(16), ra, tt.MaybePILToTensor()])
    img = Image.new("RGB", (20, 20), (200, 100, 50))
    with pytest.raises(ValueError, match="bits"):
        ra(img)
    with pytest.raises(ValueError, match="bits"):
        ImageOps.posterize(img, 0)
    recipe = build_recipe(pipeline)
    out = recipe(IMAGES[0], random.Random(0), SEEDER)
    assert out.shape == (3, 16, 16) and int(out.max()) == 0
    assert ra.ops[0].aug_fn is aa.posterize  # the user's pipeline is untouched


def test_errors_that_teach() -> None:
    for batch_op, name in (
        (v2.MixUp(num_classes=5), "v2.MixUp"),
        (v2.CutMix(num_classes=5), "v2.CutMix"),
    ):
        with pytest.raises(ConfigError, match=rf"{name} mixes the samples of a batch.*device"):
            build_recipe(v2.Compose([v2.RandomResizedCrop(8), v2.RandomApply([batch_op])]))
    from timm.data import Mixup

    with pytest.raises(ConfigError, match="timm's Mixup mixes"):
        build_recipe(T.Compose([T.RandomResizedCrop(8), Mixup(num_classes=5)]))
    # image_size against the pipeline, fused or not, with the op named
    with pytest.raises(ConfigError, match=r"image_size=32 but .*RandomResizedCrop.*outputs 40x40"):
        build_recipe(V1["tutorial"], image_size=32)
    unfused = v2.Compose([v2.RandomRotation(10), v2.CenterCrop(20)])
    with pytest.raises(ConfigError, match=r"image_size=24 but the transform .* outputs 20x20"):
        build_recipe(unfused, image_size=24)
    assert build_recipe(unfused, image_size=20).size == (20, 20)
    # a float pipeline where uint8 was asked for
    with pytest.raises(ConfigError, match="output='float'"):
        build_recipe(TIMM["eval-crop-pct"], output="uint8")
    with pytest.raises(ConfigError, match=r"wrap it in A\.Compose"):
        build_recipe(A.RandomResizedCrop(size=(8, 8)))


def test_an_op_that_cannot_take_its_image_is_named_at_build_time() -> None:
    """After a fused head every sample's tail gets the same kind of image: a library op that
    refuses it is a one-line ConfigError naming the op and the fix, not an error per sample."""
    for tf in (
        v2.Compose([v2.RandomResizedCrop(24), v2.Normalize(MEAN, STD)]),
        T.Compose([T.CenterCrop(20), T.Normalize(MEAN, STD)]),
    ):
        with pytest.raises(ConfigError, match=r"Normalize cannot take a uint8 tensor .*ToDtype"):
            build_recipe(tf)
    # an unfused pipeline is probed on images of our choosing: its ops may refuse them
    big_crop = v2.Compose([v2.RandomRotation(5), v2.RandomCrop(500)])
    assert build_recipe(big_crop).size is None


def test_library_heads_keep_their_own_size() -> None:
    """A size schedule replaces the fused crop's size of a v2 pipeline only: another library's
    crop is rebuilt per size with per_size(factory)."""
    from loaders.recipe.book import Recipes

    with pytest.raises(ConfigError, match="per_size"):
        Recipes(TIMM["train-color-jitter"], image_size={0: 32, 2: 40}).at(3)
