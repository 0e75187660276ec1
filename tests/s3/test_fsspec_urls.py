"""Any fsspec URL works like a local folder: file:// and memory:// (in-process) here."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from loaders import make_loader
from shard_writer.pack import PackOptions, pack
from shard_writer.verify import verify_dataset
from tests.conftest import make_tree


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return make_tree(tmp_path_factory.mktemp("urls") / "src", {"x": 9, "y": 8}, seed=4)


def _keys(source: str) -> list[str]:
    loader = make_loader(source, 4, image_size=16, num_workers=0, seed=3)
    return [k for batch in loader for k in batch["keys"]]


def test_memory_url_round_trip(tree: Path, tmp_path: Path) -> None:
    local = tmp_path / "local"
    options = PackOptions(workers=1, max_count=5)  # memory:// lives in this process only
    pack(str(tree), str(local), options)
    pack(str(tree), "memory://wds-test/ds", options)
    fs = fsspec.filesystem("memory")
    for p in sorted(local.iterdir()):
        assert fs.cat_file(f"/wds-test/ds/{p.name}") == p.read_bytes(), p.name
    assert not fs.exists("/wds-test/ds/.wdstool-pack")
    assert verify_dataset("memory://wds-test/ds")["num_samples"] == 17
    assert _keys("memory://wds-test/ds") == _keys(str(local))


def test_file_url_round_trip(tree: Path, tmp_path: Path) -> None:
    local = tmp_path / "plain"
    pack(str(tree), str(local), PackOptions(workers=1, max_count=5))
    url = f"file://{tmp_path / 'viaurl'}"
    pack(str(tree), url, PackOptions(workers=1, max_count=5))
    assert {p.name: p.read_bytes() for p in (tmp_path / "viaurl").iterdir()} == {
        p.name: p.read_bytes() for p in local.iterdir()
    }
    assert _keys(url) == _keys(str(local))
