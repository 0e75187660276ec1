"""Interleaved samples (several images and text) on real shards: every image through the recipe
exactly as one image alone, or sized by the native-resolution rule exactly as decode-then-resize;
the same batches for any worker count; the order of text and images from KEY.json or from the
numbered members; bad samples named."""

from __future__ import annotations

import io
import json
import random
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from loaders import Interleaved, NativeResolution, make_loader, split_images
from wdstool.base.errors import ConfigError, SampleError
from wdstool.format.decode import decode_rgb


def _jpeg(seed: int, w: int, h: int) -> bytes:
    """The same bytes for the same arguments (PIL's effect_noise draws from C's rand())."""
    rng = random.Random(seed)
    base = Image.new("RGB", (w, h), tuple(rng.randrange(256) for _ in range(3)))
    noise = Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3))
    img = Image.blend(base, noise, 0.4)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))


SAMPLES = 11


def images_of(k: int) -> list[bytes]:
    return [_jpeg(100 * k + i, 70 + 13 * i + 3 * k, 50 + 9 * k) for i in range(k % 4)]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """11 samples, 0-3 images each (OBELICS order in KEY.json), in 2 shards; and the same
    images one per sample (``single/``)."""
    root = tmp_path_factory.mktemp("interleaved")
    for s, ks in enumerate((range(0, 6), range(6, SAMPLES))):
        members = []
        for k in ks:
            key = f"doc{k:03d}"
            imgs = images_of(k)
            texts: list[Any] = [f"first text of {k}"]
            names: list[Any] = [None]
            for i, data in enumerate(imgs):
                members.append((f"{key}.{i}.jpg", data))
                texts.append(None)
                names.append(f"{i}.jpg")
                texts.append(f"after image {i}")
                names.append(None)
            members += [
                (f"{key}.json", json.dumps({"texts": texts, "images": names}).encode()),
                (f"{key}.cls", b"%d" % (k % 2)),
            ]
        _tar(root / f"docs-{s:06d}.tar", members)
    single = root / "single"
    single.mkdir()
    _tar(
        single / "one-000000.tar",
        [
            (f"img{k:03d}_{i}.{ext}", data)
            for k in range(SAMPLES)
            for i, d in enumerate(images_of(k))
            for ext, data in (("jpg", d), ("cls", b"0"))
        ],
    )
    return root


def _all(loader: Any) -> dict[str, tuple[list[Any], list[torch.Tensor]]]:
    """key -> (segments, images) over one epoch."""
    out = {}
    for batch in loader:
        images = split_images(batch)
        owner = batch["image_owner"].tolist()
        for i, key in enumerate(batch["keys"]):
            out[key] = (
                batch["segments"][i],
                [im.clone() for im, o in zip(images, owner, strict=True) if o == i],
            )
    return out


def _loader(shards: Path, **kw: Any) -> Any:
    kw = {"batch_size": 3, "rank": 0, "world_size": 1, "num_workers": 0, **kw}
    return make_loader(str(shards / "docs-{000000..000001}.tar"), **kw)


def test_every_image_through_the_recipe_as_if_alone(shards: Path) -> None:
    """The eval recipe is deterministic: each image of an interleaved sample gets the pixels
    the plain loader gives that image alone."""
    got = _all(_loader(shards, output=Interleaved(), image_size=32, train=False))
    alone = {}
    for batch in make_loader(
        str(shards / "single" / "one-000000.tar"), batch_size=4, image_size=32, train=False,
        num_workers=0, rank=0, world_size=1,
    ):  # fmt: skip
        for key, img in zip(batch["keys"], batch["pixel_values"], strict=True):
            alone[key] = img
    assert len(got) == SAMPLES
    for k in range(SAMPLES):
        segments, images = got[f"doc{k:03d}"]
        assert len(images) == k % 4
        want_segments: list[Any] = [f"first text of {k}"]
        for i in range(k % 4):
            want_segments += [i, f"after image {i}"]
        assert segments == want_segments
        for i, img in enumerate(images):
            assert torch.equal(img, alone[f"img{k:03d}_{i}"]), (k, i)


def test_native_resolution_is_decode_then_resize(shards: Path) -> None:
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2.functional import resize

    rule = NativeResolution(min_pixels=28 * 28, max_pixels=56 * 84, patch=28)
    got = _all(_loader(shards, output=Interleaved(native=rule)))
    checked = 0
    for k in range(SAMPLES):
        for i, (img, data) in enumerate(zip(got[f"doc{k:03d}"][1], images_of(k), strict=True)):
            whole = decode_rgb(data)
            h, w = rule.size(*whole.shape[1:])
            assert h % 28 == 0 and w % 28 == 0 and 28 * 28 <= h * w <= 56 * 84
            want = resize(whole, [h, w], interpolation=InterpolationMode.BICUBIC, antialias=True)
            assert torch.equal(img, want), (k, i)
            checked += 1
    assert checked == sum(k % 4 for k in range(SAMPLES))


@pytest.mark.slow
def test_same_batches_for_any_worker_count_and_mode(shards: Path) -> None:
    """Training draws, seeded per (sample, occurrence, image index): the same pixels however
    the samples are spread over workers."""
    kw: dict[str, Any] = dict(output=Interleaved(), image_size=24, seed=5)
    base = _all(_loader(shards, **kw))
    for extra in ({"num_workers": 2}, {"num_workers": 3, "worker_mode": "thread"}):
        other = _all(_loader(shards, **kw, **extra))
        assert other.keys() == base.keys()
        for key, (segments, images) in base.items():
            assert other[key][0] == segments
            assert all(torch.equal(a, b) for a, b in zip(other[key][1], images, strict=True))


def test_each_image_of_a_sample_draws_its_own_augmentation(tmp_path: Path) -> None:
    """One image twice in a sample: two crops, each seeded by its image index."""
    same = _jpeg(7, 90, 70)
    _tar(tmp_path / "twice-000000.tar", [("t.0.jpg", same), ("t.1.jpg", same), ("t.cls", b"0")])
    src = str(tmp_path / "twice-000000.tar")
    kw: dict[str, Any] = dict(batch_size=1, image_size=16, num_workers=0, rank=0, world_size=1)
    crops = []
    for seed in (0, 1, 2):
        (batch,) = list(make_loader(src, output=Interleaved(), seed=seed, **kw))
        a, b = split_images(batch)
        crops.append(not torch.equal(a, b))
    assert all(crops)


def test_numbered_members_without_order_put_images_first(tmp_path: Path) -> None:
    a, b = _jpeg(1, 40, 30), _jpeg(2, 30, 40)
    _tar(
        tmp_path / "llava-000000.tar",
        [("q0.1.jpg", b), ("q0.0.jpg", a), ("q0.txt", b"what differs?"), ("q0.cls", b"1")],
    )
    loader = make_loader(
        str(tmp_path / "llava-000000.tar"), batch_size=1, output=Interleaved(native=NativeResolution()),
        num_workers=0, rank=0, world_size=1,
    )  # fmt: skip
    (batch,) = list(loader)
    assert batch["segments"] == [[0, 1, "what differs?"]]
    assert batch["image_sizes"].tolist() == [
        list(NativeResolution().size(30, 40)),
        list(NativeResolution().size(40, 30)),
    ]


def test_max_images_keeps_the_first(shards: Path) -> None:
    got = _all(_loader(shards, output=Interleaved(max_images=1), image_size=16))
    assert got["doc003"][0] == [
        "first text of 3",
        0,
        "after image 0",
        "after image 1",
        "after image 2",
    ]
    assert len(got["doc003"][1]) == 1


def test_a_json_naming_a_missing_image_is_named_or_replaced(tmp_path: Path) -> None:
    order = json.dumps({"texts": ["hi", None], "images": [None, "1.jpg"]}).encode()
    good = json.dumps({"texts": [None], "images": ["0.jpg"]}).encode()
    _tar(
        tmp_path / "bad-000000.tar",
        [
            ("a.0.jpg", _jpeg(3, 30, 30)),
            ("a.json", order),
            ("b.0.jpg", _jpeg(4, 30, 30)),
            ("b.json", good),
        ],
    )
    kw: dict[str, Any] = dict(batch_size=2, output=Interleaved(), image_size=16, num_workers=0,
                              rank=0, world_size=1, label=None, shuffle=False)  # fmt: skip
    with pytest.raises(
        SampleError, match=r"bad-000000.tar: sample 'a': .json names image member '1.jpg'"
    ):
        list(make_loader(str(tmp_path / "bad-000000.tar"), **kw))
    (batch,) = list(
        make_loader(str(tmp_path / "bad-000000.tar"), on_error="skip", max_replaced=None, **kw)
    )
    assert batch["keys"] == ["b", "b"]


def test_settings_an_interleaved_loader_refuses(shards: Path) -> None:
    from torchvision.transforms import v2

    src = str(shards / "docs-000000.tar")
    with pytest.raises(ConfigError, match="channels_last"):
        make_loader(src, output=Interleaved(), channels_last=True, num_workers=0)
    with pytest.raises(ConfigError, match="views"):
        make_loader(src, output=Interleaved(), views=[(v2.RandomResizedCrop(8), 2)])
    floats = v2.Compose([v2.Resize(16), v2.ToDtype(torch.float32, scale=True)])
    with pytest.raises(ConfigError, match="uint8"):  # known once the transform ran
        list(make_loader(src, output=Interleaved(), transform=floats, num_workers=0))
    with pytest.raises(ConfigError, match="min_pixels=900 is above max_pixels=800"):
        NativeResolution(min_pixels=900, max_pixels=800)
    with pytest.raises(ConfigError, match=r"give a loaders\.NativeResolution"):
        Interleaved(native=224)  # type: ignore[arg-type]


def test_tokenized_samples_put_each_images_placeholders_in_its_place(
    shards: Path, tmp_path: Path
) -> None:
    """input_ids are the tokenizer's own encoding of the sample's order, each image a run of
    placeholder ids as long as image_tokens says for its output size, at image_spans."""
    from loaders import TextTokenizer
    from tests.support.tokenizers_local import save_json

    path = save_json(tmp_path / "tokenizer.json")
    tok = TextTokenizer(str(path), image_token="<image>")
    rule = NativeResolution(min_pixels=28 * 28, max_pixels=56 * 84)
    spec = Interleaved(native=rule, tokenizer=tok, image_tokens=_tokens_per_image)
    kw: dict[str, Any] = dict(output=spec, num_workers=2)
    loader = _loader(shards, **kw)
    seen = 0
    for batch in loader:
        owner = batch["image_owner"].tolist()
        images = split_images(batch)
        for i, _key in enumerate(batch["keys"]):
            n = int(batch["input_ids_lengths"][i])
            ids = batch["input_ids"][i, :n]
            assert not batch["input_ids_mask"][i, n:].any()
            mine = [j for j, o in enumerate(owner) if o == i]
            counts = [_tokens_per_image(*images[j].shape[1:]) for j in mine]
            want = tok.encode_interleaved(batch["segments"][i], counts)
            assert torch.equal(ids, want.input_ids)
            for j, (start, length) in zip(mine, batch["image_spans"][mine].tolist(), strict=True):
                assert length == _tokens_per_image(*images[j].shape[1:])
                assert (ids[start : start + length] == tok.image_token_id).all()
                seen += 1
    assert seen == sum(k % 4 for k in range(SAMPLES))


def _tokens_per_image(h: int, w: int) -> int:
    return (h // 28) * (w // 28)
