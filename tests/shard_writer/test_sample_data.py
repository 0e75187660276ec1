"""sample-data: real photographs, deterministic bytes, ImageFolder-compatible."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torchvision
from PIL import Image

from shard_writer.sample_data import generate_sample_data
from tests.conftest import run_cli
from wdstool.base.errors import ConfigError, DestinationError


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.jpg"))
    }


def test_tree_shape_sizes_and_determinism(tmp_path: Path) -> None:
    a = generate_sample_data(tmp_path / "a", images=24, classes=5, seed=3, workers=1)
    generate_sample_data(tmp_path / "b", images=24, classes=5, seed=3, workers=2)
    generate_sample_data(tmp_path / "c", images=24, classes=5, seed=4, workers=1)
    assert a.images == 24 and a.classes == 5
    da, db, dc = digests(tmp_path / "a"), digests(tmp_path / "b"), digests(tmp_path / "c")
    assert da == db  # same seed: same bytes, whatever the workers
    assert da.keys() == dc.keys() and all(da[k] != dc[k] for k in da)
    folders = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert folders == [f"class_{c:03d}" for c in range(5)]
    assert [len(list((tmp_path / "a" / f).glob("*.jpg"))) for f in folders] == [5, 5, 5, 5, 4]
    sizes = []
    for p in (tmp_path / "a").rglob("*.jpg"):
        with Image.open(p) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            assert 400 <= img.width <= 500 and 340 <= img.height <= 420
        sizes.append(p.stat().st_size)
    assert 70_000 < sum(sizes) / len(sizes) < 140_000
    assert a.total_bytes == sum(sizes)
    tv = torchvision.datasets.ImageFolder(str(tmp_path / "a"))
    assert len(tv.classes) == 5 and len(tv) == 24
    assert not list((tmp_path / "a").rglob(".*tmp*"))


def test_bad_arguments_and_foreign_destination(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        generate_sample_data(tmp_path / "x", images=0, classes=1)
    with pytest.raises(ConfigError):
        generate_sample_data(tmp_path / "x", images=3, classes=4)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(DestinationError, match=r"notes\.txt"):
        generate_sample_data(tmp_path / "busy", images=2, classes=1)


def test_cli(tmp_path: Path) -> None:
    r = run_cli(
        "sample-data", str(tmp_path / "d"), "--images", "6", "--classes", "2", "--seed", "1"
    )
    assert "wrote 6 images in 2 classes" in r.stdout
    bad = run_cli(
        "sample-data", str(tmp_path / "e"), "--images", "2", "--classes", "5", check=False
    )
    assert bad.returncode != 0 and "--classes" in bad.stderr and "Traceback" not in bad.stderr


def test_size_option(tmp_path: Path) -> None:
    """--size WxH: images about that size (each side within the default's +-11% spread), same
    seed same bytes; a malformed size is a one-line error."""
    r = run_cli(
        "sample-data", str(tmp_path / "big"), "--images", "3", "--classes", "1", "--size", "800x600"
    )
    assert "wrote 3 images" in r.stdout
    for p in (tmp_path / "big").rglob("*.jpg"):
        with Image.open(p) as img:
            assert 800 * 400 / 450 <= img.width <= 800 * 500 / 450 + 1
            assert 600 * 340 / 380 <= img.height <= 600 * 420 / 380 + 1
    generate_sample_data(tmp_path / "again", images=3, classes=1, workers=1, size=(800, 600))
    generate_sample_data(tmp_path / "default", images=3, classes=1, workers=1)
    assert digests(tmp_path / "big") == digests(tmp_path / "again")
    assert digests(tmp_path / "big").keys() == digests(tmp_path / "default").keys()
    assert all(digests(tmp_path / "big")[k] != v for k, v in digests(tmp_path / "default").items())
    for bad in ("10x10", "1600", "wide"):
        proc = run_cli("sample-data", str(tmp_path / "x"), "--size", bad, check=False)
        assert proc.returncode != 0 and "--size" in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(ConfigError, match=r"^size=\(8, 8\): must be \(width, height\)"):
        generate_sample_data(tmp_path / "y", images=1, classes=1, size=(8, 8))
