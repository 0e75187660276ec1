"""make_loader(transform=<a v2 pipeline>): the same batches, pixels included, for any number of
workers, either worker mode and after a resume; the fallback for pipelines that cannot be fused;
one-line errors naming the sample for pipelines that misbehave."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

from loaders import make_loader
from wdstool.base.errors import ConfigError, SampleError

pytestmark = pytest.mark.slow
BICUBIC = v2.InterpolationMode.BICUBIC


def _grain(img: torch.Tensor) -> torch.Tensor:
    """An opaque op drawing from Python's and numpy's global generators (as timm's do)."""
    shift = random.randint(0, 40) + int(np.random.randint(0, 40))
    return img.add(shift).clamp_(0, 255).to(torch.uint8) if shift else img


def recipe(size: int = 24) -> v2.Compose:
    return v2.Compose(
        [
            v2.RandomResizedCrop(size, interpolation=BICUBIC),
            v2.RandomHorizontalFlip(),
            v2.TrivialAugmentWide(),
            v2.ColorJitter(0.3, 0.3, 0.3),
            v2.RandomErasing(0.5),
            _grain,
        ]
    )


def _epoch(loader, epoch: int = 1) -> list[tuple[list[str], torch.Tensor]]:
    loader.set_epoch(epoch)
    return [(b["keys"], b["pixel_values"].clone()) for b in loader]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        ka == kb and torch.equal(pa, pb) for (ka, pa), (kb, pb) in zip(a, b, strict=True)
    )


def _loader(ds: Path, **kw):
    common = dict(transform=recipe(), seed=4, pin_memory=False)
    return make_loader(ds, 4, **{**common, **kw})


def _by_key(batches) -> dict[str, torch.Tensor]:
    return {k: p[i] for keys, p in batches for i, k in enumerate(keys)}


def test_pixels_do_not_depend_on_workers_mode_or_resume(uneven_dataset: Path) -> None:
    """Random post-crop ops (TrivialAugmentWide, ColorJitter, RandomErasing, an opaque op on
    Python's and numpy's generators) give every sample the same pixels with 0, 1 or 2 worker
    processes (the order of samples is the plan's, which depends on the worker count), and the
    very same batches in decode threads and after a resume on the other worker mode; another
    epoch gives other pixels."""
    ref = _epoch(_loader(uneven_dataset, num_workers=2))
    pixels = _by_key(ref)
    assert len(pixels) == 23
    for kw in (dict(num_workers=0), dict(num_workers=1)):
        got = _by_key(_epoch(_loader(uneven_dataset, **kw)))
        assert got.keys() == pixels.keys()
        assert all(torch.equal(got[k], pixels[k]) for k in pixels), kw
    assert _same(_epoch(_loader(uneven_dataset, num_workers=2, worker_mode="thread")), ref)
    other = _by_key(_epoch(_loader(uneven_dataset, num_workers=0), epoch=2))
    assert not any(torch.equal(other[k], pixels[k]) for k in pixels)

    first = _loader(uneven_dataset, num_workers=2)
    first.set_epoch(1)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    del it
    resumed = _loader(uneven_dataset, num_workers=2, worker_mode="thread")
    resumed.load_state_dict(state)
    assert _same([(b["keys"], b["pixel_values"].clone()) for b in resumed], ref[2:])


def _generators_after_an_epoch(ds: Path, **kw) -> tuple:
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    _epoch(_loader(ds, **kw))
    return torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()


def test_the_training_process_generators_are_left_alone(uneven_dataset: Path) -> None:
    """num_workers=0 and decode threads run the ops in the training process: its torch, Python
    and numpy generators come out of an epoch as they do with the built-in recipe, which draws
    nothing from them (torch's DataLoader itself draws one base seed per epoch)."""
    for kw in (dict(num_workers=0), dict(num_workers=2, worker_mode="thread")):
        plain = _generators_after_an_epoch(uneven_dataset, transform=None, **kw)
        ours = _generators_after_an_epoch(uneven_dataset, **kw)
        assert torch.equal(ours[0], plain[0]) and ours[1] == plain[1], kw
        assert np.array_equal(ours[2], plain[2]), kw


def test_a_fused_recipe_uses_the_buffer_pool(uneven_dataset: Path) -> None:
    loader = _loader(uneven_dataset, num_workers=2)
    assert loader.recipe.fused and loader.recipe.size == (24, 24)
    for _ in range(2):
        _epoch(loader)
    assert loader.dataset._shared_pool is not None
    assert loader.buffers_returned > 0


def test_a_pipeline_that_cannot_be_fused_still_works_and_says_why(
    uneven_dataset: Path, caplog
) -> None:
    tf = v2.Compose([v2.RandomRotation(15), v2.RandomResizedCrop(20), v2.GaussianBlur(3)])
    with caplog.at_level(logging.INFO, logger="loaders.loader"):
        loader = make_loader(uneven_dataset, 4, transform=tf, num_workers=0, seed=1)
    assert not loader.recipe.fused
    assert "not fused (RandomRotation comes first): whole-image decode" in caplog.text
    ref = _epoch(loader)
    assert all(p.shape[1:] == (3, 20, 20) for _k, p in ref)
    again = _by_key(_epoch(make_loader(uneven_dataset, 4, transform=tf, num_workers=2, seed=1)))
    assert all(torch.equal(p, again[k]) for k, p in _by_key(ref).items())


def test_normalize_in_the_pipeline_gives_float_batches(uneven_dataset: Path) -> None:
    """A pipeline ending in ToDtype + Normalize: refused with output="uint8"; by default
    (output="auto") and with output="float" the batch is torchvision's normalization of the
    uint8 pipeline's batch."""
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    tail = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)]
    head = [v2.RandomResizedCrop(16), v2.RandomHorizontalFlip()]
    with pytest.raises(ConfigError, match="output='float'"):
        make_loader(uneven_dataset, 4, transform=v2.Compose(head + tail), output="uint8")
    ints = make_loader(uneven_dataset, 4, transform=v2.Compose(head), num_workers=2)
    assert ints.config.batch.output == "uint8"
    for output in ("auto", "float"):
        floats = make_loader(
            uneven_dataset, 4, transform=v2.Compose(head + tail), output=output, num_workers=2
        )
        assert floats.config.batch.output == "float"
        for (kf, pf), (ki, pi) in zip(_epoch(floats), _epoch(ints), strict=True):
            assert kf == ki and pf.dtype == torch.float32
            assert torch.equal(pf, v2.Compose(tail)(pi))


def _fails_on_one(img: torch.Tensor) -> torch.Tensor:
    if int(img.sum()) % 7 == 3:
        raise RuntimeError("this op cannot take that image")
    return img


def _wobbly(img: torch.Tensor) -> torch.Tensor:
    return img[:, : 16 + random.randint(0, 1), :16]


def test_an_op_raising_names_the_sample_or_is_replaced(uneven_dataset: Path) -> None:
    tf = v2.Compose([v2.CenterCrop(16), _fails_on_one])
    with pytest.raises(SampleError, match=r"sample '[^']+': RuntimeError: this op cannot take"):
        _epoch(make_loader(uneven_dataset, 4, transform=tf, num_workers=0))
    lenient = make_loader(uneven_dataset, 4, transform=tf, num_workers=0, on_error="skip")
    keys = [k for ks, _p in _epoch(lenient) for k in ks]
    assert len(keys) == 23 and 0 < lenient.num_replaced < 23


def test_a_varying_output_size_names_the_sample(uneven_dataset: Path) -> None:
    with pytest.raises(SampleError, match=r"sample '[^']+': the transform returned uint8 \[3, 1"):
        _epoch(make_loader(uneven_dataset, 4, transform=_wobbly, num_workers=0))
