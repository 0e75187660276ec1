"""output="encoded" + DeviceDecoder: workers ship compressed bytes and augmentation draws; the
decoder (here on the CPU fallback; nvJPEG on CUDA) gives the pixels of output="uint8"."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from loaders import DeviceDecoder, make_loader, normalize
from loaders.device import split_encoded
from shard_writer.pack import PackOptions, pack
from tests.conftest import make_tree, png_bytes
from wdstool.base.errors import ConfigError, ShardError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mixed_dataset(tmp_path_factory) -> Path:
    """JPEGs of varied sizes plus two PNGs (decoded on the host by the device decoder)."""
    root = tmp_path_factory.mktemp("mixed")
    src = make_tree(root / "src", {"a": 9, "b": 8}, seed=2)
    (src / "a" / "p1.png").write_bytes(png_bytes(1, size=(70, 50)))
    (src / "b" / "p2.png").write_bytes(png_bytes(2, size=(33, 90)))
    dest = root / "shards"
    pack(str(src), str(dest), PackOptions(workers=1, max_count=5))
    return dest


def _epoch(loader, epoch: int = 1) -> list[dict]:
    loader.set_epoch(epoch)
    return list(loader)


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("workers", [0, 2])
def test_encoded_then_decoded_on_cpu_equals_uint8_pixels(
    mixed_dataset: Path, train: bool, workers: int
) -> None:
    common = dict(image_size=24, train=train, num_workers=workers, seed=3, pin_memory=False)
    ref = _epoch(make_loader(mixed_dataset, 4, **common))
    enc = _epoch(make_loader(mixed_dataset, 4, output="encoded", **common))
    decoder = DeviceDecoder(24, device="cpu", output="uint8")
    assert [b["keys"] for b in enc] == [b["keys"] for b in ref]
    for e, r in zip(enc, ref, strict=True):
        assert "pixel_values" not in e
        assert torch.equal(e["labels"], r["labels"])
        pixels = decoder(e)
        assert pixels.dtype == torch.uint8 and torch.equal(pixels, r["pixel_values"])
        floats = DeviceDecoder(24, device="cpu")(e)
        assert torch.allclose(floats, normalize(r["pixel_values"]))


def test_encoded_batches_carry_the_stored_bytes(mixed_dataset: Path) -> None:
    import webdataset as wds

    stored = {}
    for tar in sorted(mixed_dataset.glob("*.tar")):
        for s in wds.WebDataset(str(tar), shardshuffle=False):
            stored[s["__key__"]] = s.get("jpg") or s.get("png")
    loader = make_loader(mixed_dataset, 4, output="encoded", num_workers=0, pin_memory=False)
    seen = 0
    for batch in loader:
        for key, data in zip(batch["keys"], split_encoded(batch), strict=True):
            assert bytes(data.numpy()) == stored[key]
            seen += 1
        # what crosses the process boundary: compressed bytes, not 3 x S x S pixels a sample
        assert batch["encoded"].numel() < len(batch["keys"]) * 3 * 224 * 224
    assert seen == len(stored)  # one rank: no padding


def test_encoded_rejects_pixel_ops(mixed_dataset: Path) -> None:
    """output="encoded" takes a geometric pipeline; ops on decoded pixels are refused by name."""
    from torchvision.transforms import v2

    with pytest.raises(ConfigError, match="DeviceDecoder"):
        make_loader(mixed_dataset, 4, output="encoded", transform=lambda x: x)
    recipe = v2.Compose([v2.RandomResizedCrop(16), v2.ColorJitter(0.4), v2.RandomErasing()])
    with pytest.raises(ConfigError, match="ColorJitter, RandomErasing"):
        make_loader(mixed_dataset, 4, output="encoded", transform=recipe)


def test_encoded_checks_headers_in_the_workers(uneven_dataset: Path, tmp_path: Path) -> None:
    """A destroyed header is found in the worker (named, or replaced under on_error="skip"),
    not on the device."""
    import json
    import shutil

    import webdataset as wds

    dest = tmp_path / "ds"
    shutil.copytree(uneven_dataset, dest)
    shard = dest / json.loads((dest / "index.json").read_text())["shardlist"][0]["url"]
    samples = list(wds.WebDataset(str(shard), shardshuffle=False))
    raw = bytearray(shard.read_bytes())
    pos = raw.find(samples[3]["jpg"])
    raw[pos : pos + 200] = b"\x00" * 200
    shard.write_bytes(bytes(raw))
    bad = samples[3]["__key__"]
    strict = make_loader(dest, 4, output="encoded", num_workers=0, shuffle=False)
    with pytest.raises(ShardError, match=bad):
        list(strict)
    lenient = make_loader(
        dest,
        4,
        image_size=16,
        output="encoded",
        num_workers=2,
        shuffle=False,
        on_error="skip",
        pin_memory=False,
    )
    batches = list(lenient)
    keys = [k for b in batches for k in b["keys"]]
    assert len(keys) == 23 and bad not in keys and lenient.num_replaced == 1
    decoder = DeviceDecoder(16, device="cpu")
    assert all(decoder(b).shape == (len(b["keys"]), 3, 16, 16) for b in batches)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_nvjpeg_pixels_are_close_to_the_cpu_path(mixed_dataset: Path) -> None:
    common = dict(image_size=24, num_workers=0, seed=3, pin_memory=True)
    ref = _epoch(make_loader(mixed_dataset, 4, **common))
    enc = _epoch(make_loader(mixed_dataset, 4, output="encoded", **common))
    decoder = DeviceDecoder(24, device="cuda", output="uint8")
    for e, r in zip(enc, ref, strict=True):
        got = decoder(e).cpu().float()
        assert (got - r["pixel_values"].float()).abs().mean() < 3.0


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_the_device_path_runs_on_cpu_tensors(mixed_dataset: Path, train: bool) -> None:
    """host_decode=False: whole images decoded, then the geometry applied with torchvision's
    ops, as on a GPU — on the CPU the exact pixels of output="uint8" without the scaled decode;
    a bicubic (h, w) recipe with vertical flips too."""
    from torchvision.transforms import v2

    common = dict(num_workers=0, seed=3, pin_memory=False, scaled_decode=False)
    recipes = [dict(image_size=24, train=train)]
    if train:
        recipes.append(
            dict(
                transform=v2.Compose(
                    [
                        v2.RandomResizedCrop((20, 28), interpolation=v2.InterpolationMode.BICUBIC),
                        v2.RandomVerticalFlip(),
                    ]
                )
            )
        )
    for kw in recipes:
        ref = _epoch(make_loader(mixed_dataset, 4, **common, **kw))
        enc = _epoch(make_loader(mixed_dataset, 4, output="encoded", **common, **kw))
        decoder = DeviceDecoder(device="cpu", output="uint8", host_decode=False)
        for e, r in zip(enc, ref, strict=True):
            assert torch.equal(decoder(e), r["pixel_values"])
    with pytest.raises(ConfigError, match="image_size"):
        DeviceDecoder(32, device="cpu")(enc[0])


def test_device_augmentation_example_runs(learnable_dataset: Path) -> None:
    """examples/device_augment.py: MixUp/CutMix and RandomErasing on the normalized batch."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    args = ["--steps", "3", "--workers", "0", "--batch-size", "8", "--image-size", "32"]
    r = subprocess.run(
        [
            sys.executable,
            str(root / "examples" / "device_augment.py"),
            str(learnable_dataset),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "fused into the decoder: RandomResizedCrop(32, bicubic)" in r.stdout
    assert r.stdout.count("labels (8, 3)") == 3  # soft labels over the 3 classes
