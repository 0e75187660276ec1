"""channels_last=True: the same batches, laid out [B,S,S,3] in memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from loaders import make_loader


def _epoch(ds: Path, **kw) -> list[dict]:
    if kw.get("transform") is None:  # a transform sets its own size
        kw["image_size"] = 24
    loader = make_loader(str(ds), 4, seed=3, persistent_workers=False, **kw)
    loader.set_epoch(1)
    return list(loader)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("output", ["uint8", "float"])
@pytest.mark.parametrize("train", [True, False])
def test_same_values_channels_last_memory(
    uneven_dataset: Path, workers: int, output: str, train: bool
) -> None:
    kw = {"num_workers": workers, "output": output, "train": train}
    plain = _epoch(uneven_dataset, **kw)
    cl = _epoch(uneven_dataset, channels_last=True, **kw)
    assert len(cl) == len(plain) and len(cl[-1]["keys"]) == 3  # a partial batch included
    for a, b in zip(plain, cl, strict=True):
        assert a["keys"] == b["keys"] and torch.equal(a["labels"], b["labels"])
        x, y = a["pixel_values"], b["pixel_values"]
        assert x.is_contiguous() and not y.is_contiguous()
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert y.shape == x.shape and y.dtype == x.dtype and torch.equal(x, y)


def test_with_a_user_transform(uneven_dataset: Path) -> None:
    def half(img: torch.Tensor) -> torch.Tensor:
        return img[:, :16, :16].float() / 2

    batches = _epoch(
        uneven_dataset, num_workers=0, transform=half, channels_last=True, output="float"
    )
    assert all(b["pixel_values"].is_contiguous(memory_format=torch.channels_last) for b in batches)
    plain = _epoch(uneven_dataset, num_workers=0, transform=half, output="float")
    assert all(
        torch.equal(a["pixel_values"], b["pixel_values"])
        for a, b in zip(plain, batches, strict=True)
    )
