"""A batch's images into their [3,h,w] planes: the compiled copy (loaders/kinds/_planar.c) gives
the bytes torch's copy of the permuted view gives, for interleaved and planar images alike."""

from __future__ import annotations

import pytest
import torch

from loaders.kinds import interleaved
from loaders.kinds.interleaved import into_planes

needs_ext = pytest.mark.skipif(interleaved.to_planar is None, reason="_planar not built here")


def _images() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out = []
    for h, w in [(1, 1), (3, 5), (17, 31), (28, 560), (480, 640), (1, 4097)]:
        hwc = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g)
        out.append(hwc.permute(2, 0, 1))  # as the decoder and a channels-last resize give it
        out.append(hwc.permute(2, 0, 1).contiguous())  # already planes
    return out


@needs_ext
def test_the_compiled_copy_gives_torchs_bytes() -> None:
    for im in _images():
        dst = torch.full((im.numel(),), 7, dtype=torch.uint8)
        into_planes(dst, im)
        assert torch.equal(dst.view(im.shape), im.contiguous()), tuple(im.shape)
    with pytest.raises(ValueError, match="to_planar: 6 bytes into 9"):
        interleaved.to_planar(bytes(6), bytearray(9))


def test_without_it_torchs_copy_gives_the_same(monkeypatch) -> None:
    monkeypatch.setattr(interleaved, "to_planar", None)
    for im in _images():
        dst = torch.empty(im.numel(), dtype=torch.uint8)
        into_planes(dst, im)
        assert torch.equal(dst.view(im.shape), im.contiguous())


def _reference_patches(im: torch.Tensor, p: int, m: int) -> torch.Tensor:
    """torch's copy of the permuted view: Qwen2-VL's processor's order of the patches."""
    c, h, w = im.shape
    blocks = im.reshape(c, h // (p * m), m, p, w // (p * m), m, p)
    return blocks.permute(1, 4, 2, 5, 0, 3, 6).contiguous().flatten()


@needs_ext
@pytest.mark.parametrize(("p", "m"), [(14, 2), (16, 1), (3, 3)])
def test_the_compiled_patches_give_torchs_bytes(p: int, m: int) -> None:
    from loaders.families import Qwen2VL

    to_patches = interleaved.to_patches

    family = Qwen2VL(patch_size=p, merge_size=m)
    g = torch.Generator().manual_seed(1)
    for bh, bw in [(1, 1), (2, 3), (1, 25), (14, 18)]:
        hwc = torch.randint(0, 256, (bh * p * m, bw * p * m, 3), dtype=torch.uint8, generator=g)
        for im in (hwc.permute(2, 0, 1), hwc.permute(2, 0, 1).contiguous()):
            dst = torch.full((im.numel(),), 7, dtype=torch.uint8)
            family.into(dst, im)
            assert torch.equal(dst, _reference_patches(im, p, m)), (bh, bw, im.stride())
    with pytest.raises(ValueError, match="to_patches: 84 bytes into 84, width 14"):
        to_patches(bytes(84), bytearray(84), 14, 14, 2)  # 2 rows: not a block of 28
