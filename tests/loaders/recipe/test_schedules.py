"""Training schedules in the loader: a size per epoch, repeated augmentation, multi-crop views."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import torch
from torchvision.transforms import v2

from loaders import linear_ramp, make_loader, per_size
from loaders.recipe.multi_crop import partial_cost
from loaders.recipe.schedule import SizeSchedule
from wdstool.base.errors import ConfigError

pytestmark = pytest.mark.slow
BICUBIC = v2.InterpolationMode.BICUBIC


def _shapes(loader, epoch: int) -> set[tuple[int, ...]]:
    loader.set_epoch(epoch)
    return {tuple(b["pixel_values"].shape[1:]) for b in loader}


def test_ffcv_ramp_and_step_schedules() -> None:
    ramp = linear_ramp(160, 192, end_ramp=13, start_ramp=11)
    assert [ramp(e) for e in (0, 11, 12, 13, 40)] == [160, 160, 192, 192, 192]
    assert linear_ramp(160, 224, end_ramp=10)(5) == 192  # 192 = round(192 / 32) * 32
    steps = SizeSchedule({3: 20, 0: 16, 5: (24, 32)})
    assert [steps(e) for e in range(7)] == [(16, 16)] * 3 + [(20, 20)] * 2 + [(24, 32)] * 2
    assert steps.largest == (24, 32)
    with pytest.raises(ConfigError, match="below 8"):
        SizeSchedule({0: 4})
    with pytest.raises(ConfigError, match="larger than"):
        SizeSchedule(lambda e: 16 if e < 1000 else 32)(1500)


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_size_schedule_changes_the_output_per_epoch_and_survives_resume(
    uneven_dataset: Path, mode: str
) -> None:
    """{0: 16, 2: (20, 24)} with the built-in recipe and with a v2 pipeline; a state saved
    mid-epoch 2 resumes at epoch 2's size; the pool is sized once."""
    for transform in (None, v2.Compose([v2.RandomResizedCrop(8), v2.RandomHorizontalFlip()])):
        kw = dict(image_size={0: 16, 2: (20, 24)}, transform=transform, worker_mode=mode)
        loader = make_loader(uneven_dataset, 4, num_workers=2, seed=1, **kw)
        first = _shapes(loader, 0)
        pool = loader.dataset._shared_pool
        assert [first] + [_shapes(loader, e) for e in (1, 2)] == [{(3, 16, 16)}] * 2 + [
            {(3, 20, 24)}
        ]
        assert pool is not None and loader.dataset._shared_pool is pool
        loader.set_epoch(2)
        it = iter(loader)
        first = [next(it)["keys"] for _ in range(2)]
        state = loader.state_dict()
        del it
        resumed = make_loader(uneven_dataset, 4, num_workers=1, seed=1, **kw)
        resumed.load_state_dict(state)
        rest = [b for b in resumed]
        assert {tuple(b["pixel_values"].shape[1:]) for b in rest} == {(3, 20, 24)}
        assert len(first) + len(rest) == len(loader)


def _crop_then(size: tuple[int, int]) -> v2.Compose:
    return v2.Compose([v2.RandomResizedCrop(size), v2.CenterCrop((size[0] // 2, size[1] // 2))])


def test_size_dependent_ops_through_per_size(uneven_dataset: Path) -> None:
    loader = make_loader(
        uneven_dataset, 4, num_workers=0, transform=per_size(_crop_then), image_size={0: 16, 1: 24}
    )
    assert [_shapes(loader, e) for e in range(2)] == [{(3, 8, 8)}, {(3, 12, 12)}]
    with pytest.raises(ConfigError, match="needs image_size"):
        make_loader(uneven_dataset, 4, transform=per_size(_crop_then))
    with pytest.raises(ConfigError, match="has none"):  # nothing fused: no crop size to replace
        make_loader(uneven_dataset, 4, transform=v2.RandomRotation(3), image_size={0: 8})


def test_repeats_give_each_copy_its_own_pixels(uneven_dataset: Path) -> None:
    """repeats=3 on 23 samples: 8 distinct samples 3 times (the last one twice), each copy its
    own draws; the same number of batches as without repeats; another epoch, other samples."""
    loader = make_loader(uneven_dataset, 4, image_size=16, num_workers=2, repeats=3, seed=2)
    plain = make_loader(uneven_dataset, 4, image_size=16, num_workers=2, seed=2)
    assert len(loader) == len(plain)
    seen = set()
    for epoch in range(3):
        loader.set_epoch(epoch)
        copies: dict[str, list[torch.Tensor]] = {}
        for b in loader:
            for k, px in zip(b["keys"], b["pixel_values"], strict=True):
                copies.setdefault(k, []).append(px.clone())
        assert sum(len(c) for c in copies.values()) == 23
        assert sorted(Counter(len(c) for c in copies.values()).items()) == [(2, 1), (3, 7)]
        for c in copies.values():
            assert len({bytes(px.numpy()) for px in c}) == len(c)  # distinct draws per copy
        seen |= set(copies)
    assert len(seen) == 23  # every sample within 3 epochs


DINO = [
    (v2.Compose([v2.RandomResizedCrop(24, scale=(0.32, 1), interpolation=BICUBIC)]), 2),
    (
        v2.Compose(
            [
                v2.RandomResizedCrop(12, scale=(0.05, 0.32), interpolation=BICUBIC),
                v2.RandomHorizontalFlip(),
                v2.ColorJitter(0.4, 0.4),
            ]
        ),
        3,
    ),
]


def _views(loader, epoch: int = 0) -> dict[str, list[torch.Tensor]]:
    loader.set_epoch(epoch)
    out = {}
    for b in loader:
        assert "pixel_values" not in b and len(b["views"]) == 5
        for i, k in enumerate(b["keys"]):
            out[k] = [v[i].clone() for v in b["views"]]
    return out


def test_views_shapes_order_and_determinism(uneven_dataset: Path) -> None:
    """DINO-style 2 global + 3 local views: shapes in the given order, each view its own draws,
    the same pixels for every sample with 0 or 2 workers or decode threads."""
    ref = _views(make_loader(uneven_dataset, 4, views=DINO, num_workers=0, seed=3))
    shapes = {tuple(x.shape) for vs in ref.values() for x in vs[:2]}
    assert shapes == {(3, 24, 24)}
    assert {tuple(x.shape) for vs in ref.values() for x in vs[2:]} == {(3, 12, 12)}
    assert all(not torch.equal(vs[0], vs[1]) for vs in ref.values())  # two different crops
    for kw in (dict(num_workers=2), dict(num_workers=2, worker_mode="thread")):
        got = _views(make_loader(uneven_dataset, 4, views=DINO, seed=3, **kw))
        assert got.keys() == ref.keys()
        assert all(torch.equal(a, b) for k in ref for a, b in zip(ref[k], got[k], strict=True))
    with pytest.raises(ConfigError, match="transform or views"):
        make_loader(uneven_dataset, 4, views=DINO, transform=v2.CenterCrop(8))
    with pytest.raises(ConfigError, match="count"):
        make_loader(uneven_dataset, 4, views=[(v2.CenterCrop(8), 0)])


def test_the_views_decode_choice() -> None:
    """One crop is decoded alone; ten (DINO) share one whole decode."""
    from loaders.recipe import build_recipe

    big = build_recipe(v2.RandomResizedCrop(24, scale=(0.32, 1))).head
    rng = random.Random(0)
    one = [big.draw(400, 300, rng)]
    ten = [big.draw(400, 300, rng) for _ in range(10)]
    assert partial_cost(one, 400, 300) < 1 < partial_cost(ten, 400, 300)
