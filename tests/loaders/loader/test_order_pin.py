"""Pins what the loader delivers for a fixed (data, seed, epoch, topology).

Performance work must not change the order or the augmentation silently. When a change is
meant to alter them (a new shuffle, a new augmentation), update the digests below in the same
commit and say so in its message. Last deliberate change: the restartable block shuffle and
per-sample augmentation seeds (exact resume).

The pixel digests also depend on Pillow's JPEG encoder (and the libjpeg it bundles): the fixture
images are encoded at test time (tests/conftest.py), so a Pillow upgrade that encodes the same
noise into other bytes changes them without any change here. The key digests do not.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from loaders import make_loader

PINNED = {  # (keys digest, pixels digest); torch 2.14.1 / torchvision 0.29.1 decoders, Pillow's encoder
    ("uint8", 0): ("1907e29023fcf3e1", "10041f99ca592432"),
    ("uint8", 1): ("22943911d360aa3a", "6f98800b433d3af1"),
    ("float", 0): ("1907e29023fcf3e1", "0ac070745f85ad62"),
}


def _digest(ds: Path, output: str, epoch: int) -> tuple[str, str]:
    loader = make_loader(
        ds, 4, image_size=24, num_workers=2, seed=5, output=output, rank=1, world_size=2
    )
    loader.set_epoch(epoch)
    keys, pixels = hashlib.sha256(), hashlib.sha256()
    for batch in loader:
        keys.update("\n".join(batch["keys"]).encode() + b"\n")
        px = batch["pixel_values"]
        if output == "float":  # hash values, not float bit patterns
            px = (px * 1000).round().to(torch.int32)
        pixels.update(px.contiguous().numpy().tobytes())
    return keys.hexdigest()[:16], pixels.hexdigest()[:16]


@pytest.mark.parametrize(("output", "epoch"), list(PINNED))
def test_delivered_keys_and_pixels_are_pinned(
    uneven_dataset: Path, output: str, epoch: int
) -> None:
    got = _digest(uneven_dataset, output, epoch)
    assert got == PINNED[(output, epoch)], f"order or pixels changed: {got}"
