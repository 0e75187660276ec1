"""Packed datasets with uneven shard sizes for loader tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import webdataset as wds

from shard_writer.pack import PackOptions, pack
from tests.conftest import make_tree


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
            img = Image.effect_noise((48, 40), 30).convert("RGB")
            img = Image.blend(img, Image.new("RGB", img.size, rgb), 0.7)
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=90)
            (src / cls / f"{i:03d}.jpg").write_bytes(buf.getvalue())
            n += 1
    dest = root / "shards"
    pack(str(src), str(dest), PackOptions(workers=1, max_count=17))
    return dest
