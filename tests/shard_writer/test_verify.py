"""verify re-reads shards and names the first bad one; inspect summarises a dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shard_writer.pack import PackOptions, pack
from shard_writer.verify import inspect_dataset, verify_dataset
from tests.conftest import run_cli
from wdstool.base.errors import ShardError


@pytest.fixture
def packed(small_tree: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "ds"
    pack(str(small_tree), str(dest), PackOptions(workers=1, max_count=6))
    return dest


def _shard(dest: Path, i: int = 1) -> Path:
    return dest / json.loads((dest / "index.json").read_text())["shardlist"][i]["url"]


def test_clean_dataset_verifies(packed: Path) -> None:
    report = verify_dataset(str(packed), decode=True)
    assert report["ok"] and report["num_samples"] == 16 and report["num_shards"] == 3
    info = inspect_dataset(str(packed / "index.json"), nkeys=3)
    assert len(info["sample_keys"]) == 3 and info["max_samples"] == 6 and info["min_samples"] == 4


@pytest.mark.parametrize("where", ["header", "image-data", "padding"])
def test_flipped_byte_is_caught(packed: Path, where: str) -> None:
    shard = _shard(packed)
    data = bytearray(shard.read_bytes())
    pos = {"header": 20, "image-data": 2000, "padding": len(data) - 10}[where]
    data[pos] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=shard.name):
        verify_dataset(str(packed))
    r = run_cli("verify", str(packed), check=False)
    assert r.returncode != 0 and shard.name in r.stderr and r.stderr.strip().count("\n") == 0


def test_truncated_and_missing_shards_are_caught(packed: Path) -> None:
    shard = _shard(packed, 2)
    shard.write_bytes(shard.read_bytes()[:3000])
    with pytest.raises(ShardError, match=rf"{shard.name}.*truncated"):
        verify_dataset(str(packed))
    shard.unlink()
    with pytest.raises(ShardError, match=rf"{shard.name}.*missing"):
        verify_dataset(str(packed))


def test_counts_disagreeing_with_manifest(packed: Path) -> None:
    manifest = json.loads((packed / "index.json").read_text())
    manifest["shardlist"][0]["nsamples"] += 1
    manifest["shardlist"][0]["sha256"] = ""  # so the count check is what trips
    (packed / "index.json").write_text(json.dumps(manifest))
    with pytest.raises(ShardError, match=r"6 samples, manifest says 7"):
        verify_dataset(str(packed))


def test_malformed_manifest_is_one_line_error(packed: Path) -> None:
    (packed / "index.json").write_text("{not json")
    r = run_cli("inspect", str(packed), check=False)
    assert r.returncode != 0 and "index.json" in r.stderr and "Traceback" not in r.stderr


def test_inspect_and_verify_of_samples_of_several_images(tmp_path: Path, packed: Path) -> None:
    from tests.support.interleaved import obelics_rows, write_rows

    dest = tmp_path / "docs"
    listing = write_rows(tmp_path / "docs.parquet", obelics_rows(tmp_path, 6))
    pack(str(listing), str(dest), PackOptions(workers=1, max_count=4))
    manifest = json.loads((dest / "index.json").read_text())
    counts = [n for e in manifest["shardlist"] for n in e["interleaved"]["images"]]
    info = inspect_dataset(str(dest))
    assert info["interleaved"] == {
        **manifest["interleaved"],
        "images_per_sample": {
            "min": min(counts),
            "mean": round(sum(counts) / 6, 3),
            "max": max(counts),
        },
    }
    assert all("interleaved" not in s for s in info["shards"])  # the totals, not every sample
    text = run_cli("inspect", str(dest)).stdout
    images = manifest["interleaved"]["images"]
    assert f"images    {images} in 6 samples of several images  (per sample: min 1," in text
    assert f"text      {manifest['interleaved']['chars']} characters" in text
    out = run_cli("verify", str(dest), "--decode", "-q").stdout
    assert out.startswith(f"ok: 2 shards, 6 samples ({images} images), ")
    assert out.rstrip().endswith("verified (images decoded)")
    # a data set of single images says nothing of them
    assert "interleaved" not in inspect_dataset(str(packed))
    assert "images    " not in run_cli("inspect", str(packed)).stdout
