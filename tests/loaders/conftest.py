"""Packed datasets with uneven shard sizes for loader tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import webdataset as wds

from shard_writer.pack import PackOptions, pack
from tests.conftest import make_tree, noise_image


def shard_keys(dest: Path) -> list[list[str]]:
    """Keys of every shard in manifest order, each in file order (read with upstream webdataset)."""
    manifest = json.loads((dest / "index.json").read_text())
    return [
        [s["__key__"] for s in wds.WebDataset(str(dest / e["url"]), shardshuffle=False)]
        for e in manifest["shardlist"]
    ]


@pytest.fixture(scope="session")
def uneven_dataset(tmp_path_factory) -> Path:
    """23 samples in 3 shards of 10, 10 and 3 (fewer shards than ranks x workers)."""
    root = tmp_path_factory.mktemp("uneven")
    src = make_tree(root / "src", {"a": 8, "b": 8, "c": 7}, seed=5)
    dest = root / "shards"
    pack(str(src), str(dest), PackOptions(workers=1, max_count=10))
    return dest


@pytest.fixture(scope="session")
def learnable_dataset(tmp_path_factory) -> Path:
    """Colour-coded classes a small CNN learns in a few steps; 7 uneven shards."""
    import io

    from PIL import Image

    root = tmp_path_factory.mktemp("learnable")
    src = root / "src"
    colours = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (20, 40, 220)}
    n = 0
    for cls, rgb in colours.items():
        (src / cls).mkdir(parents=True)
        for i in range(40):
            img = noise_image(48, 40, seed=n)
            img = Image.blend(img, Image.new("RGB", img.size, rgb), 0.7)
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=90)
            (src / cls / f"{i:03d}.jpg").write_bytes(buf.getvalue())
            n += 1
    dest = root / "shards"
    pack(str(src), str(dest), PackOptions(workers=1, max_count=17))
    return dest


@pytest.fixture(scope="session")
def photos(tmp_path_factory) -> Path:
    """96 noisy 320x240 JPEGs in 4 shards of 24 (decoding them is real work: ~0.5 ms each),
    for the loader's stats and verdicts."""
    root = tmp_path_factory.mktemp("photos")
    for i in range(96):
        d = root / "src" / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        noise_image(320, 240, seed=i).save(d / f"{i:03d}.jpg", quality=90)
    pack(str(root / "src"), str(root / "shards"), PackOptions(workers=1, max_count=24))
    return root / "shards"


def webp_bytes(seed: int) -> bytes:
    import io

    from PIL import Image

    img = Image.new("RGB", (36, 28), (seed * 37 % 256, 90, 200))
    out = io.BytesIO()
    img.save(out, format="WEBP", quality=80)
    return out.getvalue()


def write_img2dataset_shards(folder: Path, nshards: int = 3, per_shard: int = 7) -> dict:
    """Shards as img2dataset writes them, through upstream webdataset's ShardWriter: per sample
    ``KEY.jpg`` (some ``.png``/``.webp``), ``KEY.txt`` (the caption; missing for every 5th
    sample), ``KEY.json`` (url, caption, width, height, key, class_id); keys not sorted, some
    under a folder with a dot in its name; no manifest. Returns {key: what was written}."""
    from tests.conftest import jpeg_bytes, png_bytes

    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, dict] = {}
    n = 0
    with wds.ShardWriter(str(folder / "part-%05d.tar"), maxcount=per_shard, verbose=0) as sink:
        for i in range(nshards * per_shard):
            key = f"{(i * 7919) % 100_000:06d}"  # not sorted
            if i % 4 == 3:
                key = f"crawl.v2/{key}"  # a folder with a dot
            if i % 6 == 5:
                ext, image = "png", png_bytes(i)
            elif i % 6 == 4:
                ext, image = "webp", webp_bytes(i)
            else:
                ext, image = "jpg", jpeg_bytes(1000 + i)
            caption = None if i % 5 == 4 else f"photo {i} of a {['red', 'blue'][i % 2]} thing"
            meta = {
                "url": f"https://example.com/{i}.{ext}",
                "caption": caption,
                "width": 64,
                "height": 48,
                "key": key,
                "class_id": i % 3,
                "nested": {"score": i / 10, "tags": [f"t{i}", "x"]},
            }
            sample = {"__key__": key, ext: image, "json": meta}
            if caption is not None:
                sample["txt"] = caption
            sink.write(sample)
            written[key] = {"caption": caption, "meta": meta, "ext": ext}
            n += 1
    return written


@pytest.fixture(scope="session")
def img2dataset_shards(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("img2dataset") / "shards"
    return folder, write_img2dataset_shards(folder)
