"""The recipe tail's faster uint8 kernels give torchvision's pixels, bit for bit.

The oracle is torchvision's own kernel, called directly (``_color.adjust_sharpness_image``,
``_color.solarize_image``), never through the registry the fast kernels are installed into.
"""

from __future__ import annotations

import random

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional import _color
from torchvision.transforms.v2.functional._utils import _get_kernel

from loaders.recipe import Seeder, Where, build_recipe, kernels
from tests.support.jpegs import jpeg


def _images(seed: int) -> list[torch.Tensor]:
    """Random, saturated, flat and tiny uint8 images, 1 or 3 channels, batched or not."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for shape in [(3, 31, 45), (1, 17, 9), (2, 3, 12, 10), (3, 3, 3), (3, 4, 4), (3, 224, 224)]:
        out.append(torch.randint(0, 256, shape, generator=g, dtype=torch.uint8))
        out.append(torch.randint(0, 2, shape, generator=g, dtype=torch.uint8) * 255)  # extremes
        out.append(torch.full(shape, 254, dtype=torch.uint8))
        # smooth gradients: blurs land near every rounding boundary the integer blur must hit
        ramp = torch.arange(shape[-1] * shape[-2]).reshape(shape[-2:]) * 7 % 256
        out.append(ramp.to(torch.uint8).expand(shape).contiguous())
    return out


@pytest.mark.parametrize("factor", [0.0, 0.05, 0.5, 1.0, 1.3, 1.9, 2.0, 7.5])
def test_sharpness_is_torchvision_bit_for_bit(factor: float) -> None:
    for img in _images(int(factor * 100)):
        want = _color.adjust_sharpness_image(img, factor)
        got = kernels.adjust_sharpness_uint8(img, factor)
        assert got.dtype == torch.uint8 and got.shape == want.shape
        assert torch.equal(got, want), (img.shape, factor)


def test_the_integer_blur_is_the_exact_blur_rounded() -> None:
    """For every sum k = 5 * centre + 8 neighbours a uint8 image can give (0..3315)."""
    got, want = [], []
    for k in range(13 * 255 + 1):
        c = min(255, k // 5)
        rest = k - 5 * c  # spread over the neighbours, 255 at most each
        n = [min(255, max(0, rest - 255 * i)) for i in range(8)]
        patch = torch.tensor([[n[0], n[1], n[2]], [n[3], c, n[4]], [n[5], n[6], n[7]]])
        got.append(int(kernels.blur13(patch.to(torch.uint8).expand(1, 3, 3))[0, 0, 0]))
        want.append(round(k / 13))  # the exact rational is never a tie: 13 is odd
    assert got == want


@pytest.mark.parametrize("threshold", [0, 0.5, 1, 127.5, 128, 200.25, 255])
def test_solarize_is_torchvision_bit_for_bit(threshold: float) -> None:
    for img in _images(7):
        assert torch.equal(
            kernels.solarize_uint8(img, threshold), _color.solarize_image(img, threshold)
        )


def test_other_inputs_go_to_the_stock_kernels() -> None:
    f = torch.rand(3, 20, 20)
    assert torch.equal(
        kernels.adjust_sharpness_uint8(f, 1.7), _color.adjust_sharpness_image(f, 1.7)
    )
    assert torch.equal(kernels.solarize_uint8(f, 0.5), _color.solarize_image(f, 0.5))
    u = torch.zeros(3, 8, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="not non-negative"):
        kernels.adjust_sharpness_uint8(u, -1.0)
    with pytest.raises(TypeError, match="Threshold"):
        kernels.solarize_uint8(u, 300)
    with pytest.raises(TypeError, match="1 or 3 channels"):
        kernels.adjust_sharpness_uint8(torch.zeros(2, 8, 8, dtype=torch.uint8), 1.5)


def test_installed_kernels_run_the_users_transforms_unchanged() -> None:
    """RandAugment / TrivialAugmentWide / the v2 classes: same draws, same pixels, same types,
    with the fast kernels in the registry and without them."""
    kernels.uninstall()
    try:
        assert _get_kernel(F.adjust_sharpness, torch.Tensor) is _color.adjust_sharpness_image
        pipe = v2.Compose(
            [
                v2.RandAugment(num_ops=3, magnitude=12),
                v2.TrivialAugmentWide(),
                v2.RandomAdjustSharpness(1.8, p=0.5),
                v2.RandomSolarize(100.0, p=0.5),
            ]
        )
        imgs = [tv_tensors.Image(i) for i in _images(3) if i.ndim == 3 and i.shape[0] == 3]
        imgs += [i for i in _images(4) if i.ndim == 3]  # plain tensors too
        torch.manual_seed(5)
        stock = [pipe(i) for i in imgs for _ in range(12)]
        assert kernels.install() is True
        assert _get_kernel(F.adjust_sharpness, torch.Tensor) is kernels.adjust_sharpness_uint8
        assert _get_kernel(F.solarize, tv_tensors.Image).__wrapped__ is kernels.solarize_uint8
        torch.manual_seed(5)
        fast = [pipe(i) for i in imgs for _ in range(12)]
        assert len(fast) == len(stock)
        for a, b in zip(fast, stock, strict=True):
            assert type(a) is type(b) and torch.equal(a, b)
    finally:
        kernels.install()


def test_a_recipe_with_a_tail_installs_them() -> None:
    kernels.uninstall()
    recipe = build_recipe(
        v2.Compose([v2.RandomResizedCrop(32), v2.TrivialAugmentWide()]), train=True
    )
    recipe(jpeg(64, 48, "420"), random.Random(0), Seeder(Where.MAIN, opaque=False))
    assert _get_kernel(F.adjust_sharpness, tv_tensors.Image).__wrapped__ is (
        kernels.adjust_sharpness_uint8
    )
