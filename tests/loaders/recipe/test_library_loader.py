"""make_loader with the recipes users already have — timm's create_transform, the torchvision v1
tutorial, albumentations — unchanged: the batches they expect (float where the pipeline
normalizes), the same pixels for any number of workers, either worker mode and after a resume,
and one-line errors at make_loader for what cannot run per sample."""

from __future__ import annotations

from pathlib import Path

import albumentations as A
import pytest
import torch
from timm.data import create_transform
from torchvision import transforms as T
from torchvision.transforms import v2

from loaders import make_loader
from wdstool.base.errors import ConfigError

pytestmark = pytest.mark.slow
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def timm_train(size: int = 24):
    return create_transform(
        size,
        is_training=True,
        auto_augment="rand-m9-mstd0.5-inc1",
        interpolation="random",
        re_prob=0.5,
    )


def _epoch(loader, epoch: int = 1) -> list[tuple[list[str], torch.Tensor]]:
    loader.set_epoch(epoch)
    return [(b["keys"], b["pixel_values"].clone()) for b in loader]


def _by_key(batches) -> dict[str, torch.Tensor]:
    return {k: p[i] for keys, p in batches for i, k in enumerate(keys)}


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        ka == kb and torch.equal(pa, pb) for (ka, pa), (kb, pb) in zip(a, b, strict=True)
    )


def test_timm_train_transform_is_deterministic_across_workers_modes_and_resume(
    uneven_dataset: Path,
) -> None:
    """timm's RandAugment (numpy's and Python's generators), random interpolation and
    RandomErasing (Python's and torch's): float batches (the pipeline normalizes), every sample
    the same pixels with 0 or 2 worker processes, the very same batches in decode threads and
    after a resume in the other worker mode."""

    def loader(**kw):
        return make_loader(uneven_dataset, 4, transform=timm_train(), seed=2, **kw)

    first = loader(num_workers=2)
    assert "timm pipeline, fused into the decoder" in str(first.recipe)
    ref = _epoch(first)
    assert all(p.dtype == torch.float32 and p.shape[1:] == (3, 24, 24) for _k, p in ref)
    pixels = _by_key(ref)
    assert len(pixels) == 23
    alone = _by_key(_epoch(loader(num_workers=0)))
    assert all(torch.equal(alone[k], pixels[k]) for k in pixels)
    assert _same(_epoch(loader(num_workers=2, worker_mode="thread")), ref)

    interrupted = loader(num_workers=2)
    interrupted.set_epoch(1)
    it = iter(interrupted)
    for _ in range(2):
        next(it)
    state = interrupted.state_dict()
    del it
    resumed = loader(num_workers=2, worker_mode="thread")
    resumed.load_state_dict(state)
    assert _same([(b["keys"], b["pixel_values"].clone()) for b in resumed], ref[2:])


def test_the_tutorial_recipe_and_timms_eval_give_torchvisions_float_batches(
    uneven_dataset: Path,
) -> None:
    """The classic v1 recipe and timm's eval transform (ToTensor + Normalize): float batches
    by default, uint8 batches refused with the output to pass; timm's prefetcher transform
    gives uint8."""
    tutorial = T.Compose(
        [T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]
    )
    for tf in (tutorial, create_transform(24, crop_pct=0.95)):
        batches = _epoch(make_loader(uneven_dataset, 4, transform=tf, num_workers=2))
        pixels = torch.cat([p for _k, p in batches])
        assert pixels.dtype == torch.float32 and pixels.shape == (23, 3, 24, 24)
        assert pixels.min() < -1.0 and pixels.max() > 1.0  # normalized, not [0, 1]
        with pytest.raises(ConfigError, match="output='uint8'"):
            make_loader(uneven_dataset, 4, transform=tf, output="uint8")
    prefetcher = create_transform(24, is_training=True, use_prefetcher=True)
    batches = _epoch(make_loader(uneven_dataset, 4, transform=prefetcher, num_workers=0))
    assert all(p.dtype == torch.uint8 for _k, p in batches)


def _images(shards: Path) -> dict[str, bytes]:
    import webdataset as wds

    return {
        s["__key__"]: s["jpg"]
        for tar in sorted(shards.glob("*.tar"))
        for s in wds.WebDataset(str(tar), shardshuffle=False, empty_check=False)
    }


def test_a_batch_holds_what_the_recipe_gives_each_sample(uneven_dataset: Path) -> None:
    """Written straight into the batch's slot (ToTensor + Normalize in one pass, float pixels
    in shared memory): each sample's pixels are the recipe's for that sample's seed, which the
    recipe tests hold equal to the library's own pipeline."""
    import random

    from loaders.recipe import Seeder, Where, build_recipe

    tutorial = T.Compose(
        [T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]
    )
    images = _images(uneven_dataset)
    for tf in (tutorial, timm_train()):
        recipe = build_recipe(tf)
        for workers in (0, 2):
            loader = make_loader(uneven_dataset, 4, transform=tf, seed=3, num_workers=workers)
            for keys, pixels in _epoch(loader, epoch=2):
                for key, got in zip(keys, pixels, strict=True):
                    rng = random.Random(f"aug:3:2:{key}".encode())
                    want = recipe(images[key], rng, Seeder(Where.MAIN, True))
                    assert torch.equal(got, want), (key, workers)


def test_albumentations_per_thread_and_per_worker(uneven_dataset: Path) -> None:
    """An A.Compose with its own generators: the same pixels in decode threads (each thread
    draws on a copy of the pipeline) as in worker processes."""
    tf = A.Compose(
        [
            A.RandomResizedCrop(size=(24, 24)),
            A.HorizontalFlip(),
            A.RandomBrightnessContrast(p=0.8),
            A.Normalize(),
            A.ToTensorV2(),
        ]
    )

    def loader(**kw):
        return make_loader(uneven_dataset, 4, transform=tf, seed=9, **kw)

    ref = _epoch(loader(num_workers=2))
    assert ref[0][1].dtype == torch.float32
    assert _same(_epoch(loader(num_workers=2, worker_mode="thread")), ref)
    again = _by_key(_epoch(loader(num_workers=1)))
    assert all(torch.equal(again[k], p) for k, p in _by_key(ref).items())


def test_what_cannot_run_per_sample_is_said_at_make_loader(uneven_dataset: Path) -> None:
    with pytest.raises(ConfigError, match=r"v2.MixUp mixes the samples of a batch"):
        make_loader(
            uneven_dataset,
            4,
            transform=v2.Compose([v2.RandomResizedCrop(8), v2.MixUp(num_classes=3)]),
        )
    with pytest.raises(ConfigError, match=r"image_size=32 but the transform"):
        make_loader(uneven_dataset, 4, transform=timm_train(), image_size=32)
    with pytest.raises(ConfigError, match="output='encoded' decodes on the device"):
        make_loader(uneven_dataset, 4, transform=timm_train(), output="encoded")
