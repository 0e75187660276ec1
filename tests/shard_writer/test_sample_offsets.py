"""Every sample's offset, recorded beside the manifest by every writer (pack, reshard, split,
--append) and equal to what the tar's own headers say; read back a shard at a time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loaders import make_loader
from loaders.source import ShardAccess, resolve_source
from loaders.split_reads import SliceOpener
from shard_writer.pack import PackOptions, pack
from shard_writer.reshard import ReshardOptions, reshard
from shard_writer.split import split
from tests.conftest import make_tree
from wdstool.base.errors import ShardError
from wdstool.format.manifest import load_manifest
from wdstool.format.sample_offsets import OFFSETS_NAME, OffsetsFile, offsets_bytes, shard_offsets
from wdstool.format.tar_index import scan_shard


def _recorded(ds: Path) -> list[tuple[int, ...]]:
    """Each shard's offsets as the offsets file says them, checked against the manifest."""
    manifest, _ = load_manifest(str(ds))
    of = manifest.sample_offsets
    assert of is not None and of.name == OFFSETS_NAME and of.samples == manifest.num_samples
    flat = np.load(ds / OFFSETS_NAME)
    assert flat.dtype == np.dtype(of.dtype) and len(flat) == of.samples
    assert (ds / OFFSETS_NAME).stat().st_size == of.span(of.samples, 0)[0]
    out, at = [], 0
    for s in manifest.shards:
        out.append(tuple(flat[at : at + s.nsamples].tolist()))
        at += s.nsamples
    return out


def _scanned(ds: Path) -> list[tuple[int, ...]]:
    manifest, _ = load_manifest(str(ds))
    out = []
    for s in manifest.shards:
        with open(ds / s.url, "rb", buffering=0) as f:
            out.append(scan_shard(f, s.url).offsets)
    return out


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("offsets")
    tree = make_tree(root / "src", {"a": 9, "b": 8, "c": 6}, seed=4)
    ds = root / "ds"
    pack(str(tree), str(ds), PackOptions(workers=1, max_count=7))
    return tree, ds


def test_pack_records_the_offsets_the_headers_say(packed) -> None:
    _tree, ds = packed
    assert _recorded(ds) == _scanned(ds)
    assert json.loads((ds / "index.json").read_text())["sample_offsets"]["dtype"] == "<u4"


def test_reshard_split_and_append_record_them_too(packed, tmp_path: Path) -> None:
    _tree, ds = packed
    out = tmp_path / "re"
    reshard([str(ds)], str(out), ReshardOptions(workers=1, max_count=5))
    assert _recorded(out) == _scanned(out)
    split(str(ds), str(tmp_path / "sp"), [("train", 0.7), ("val", 0.3)], ReshardOptions(workers=1))
    for name in ("train", "val"):
        assert _recorded(tmp_path / "sp" / name) == _scanned(tmp_path / "sp" / name)
    more = make_tree(tmp_path / "more", {"a": 3, "d": 4}, seed=9)
    pack(str(more), str(out), PackOptions(workers=1, max_count=5, append=True))
    assert _recorded(out) == _scanned(out)


def test_an_append_onto_shards_without_offsets_marks_theirs_unknown(packed, tmp_path) -> None:
    """A data set packed before offsets were recorded: the append's offsets file says its own
    shards' and marks the old ones unknown (a reader of those walks their headers)."""
    tree, _ds = packed
    out = tmp_path / "old"
    pack(str(tree), str(out), PackOptions(workers=1, max_count=7))
    manifest = json.loads((out / "index.json").read_text())
    del manifest["sample_offsets"]
    (out / "index.json").write_text(json.dumps(manifest))
    (out / OFFSETS_NAME).unlink()
    more = make_tree(tmp_path / "more", {"a": 3}, seed=9)
    pack(str(more), str(out), PackOptions(workers=1, append=True))
    index = resolve_source(str(out))
    opener = SliceOpener(index, ShardAccess())
    scans = _scanned(out)
    old = len(manifest["shardlist"])
    assert [opener.offsets(i) for i in range(len(scans))] == [None] * old + scans[old:]


def test_offsets_of_a_shard_rewritten_since_are_not_used(packed, tmp_path: Path) -> None:
    """A manifest whose shard list changed after its offsets were recorded (a shard rewritten
    and its size and sha256 updated by hand or by another tool) names offsets of other
    shards: they are not used."""
    _tree, ds = packed
    manifest = json.loads((ds / "index.json").read_text())
    manifest["shardlist"][1]["sha256"] = "0" * 64
    edited = tmp_path / "index.json"
    edited.write_text(json.dumps(manifest))
    assert load_manifest(str(edited))[0].sample_offsets is None
    assert load_manifest(str(ds))[0].sample_offsets is not None


def test_offsets_that_do_not_fit_a_shard_are_an_error_naming_it() -> None:
    data, of = offsets_bytes([(0, 1536, 4096)], [9000], [3])
    part = data[of.data_offset :]
    assert shard_offsets(part, of, 9000, "s3://b/x.tar") == (0, 1536, 4096)
    for bad, size in (((0, 4096, 1536), 9000), ((512, 1536, 4096), 9000), ((0, 1536, 4096), 4000)):
        raw = np.asarray(bad, dtype=of.dtype).tobytes()
        with pytest.raises(ShardError, match=r"s3://b/x\.tar: the sample offsets in "):
            shard_offsets(raw, of, size, "s3://b/x.tar")
    with pytest.raises(ShardError, match=r"index\.json: malformed manifest: 'sample_offsets'"):
        OffsetsFile.from_json({**of.to_json(), "dtype": "<f8"}, 3, "index.json")
    # a manifest whose counts were edited since: its offsets are not used
    assert OffsetsFile.from_json({**of.to_json(), "samples": 4}, 3, "index.json") is None


def test_a_local_loader_reads_the_same_with_or_without_offsets(packed, tmp_path) -> None:
    """The offsets are an index for remote reads: a local data set's batches are the same with
    the file removed and the manifest naming none."""
    _tree, ds = packed
    bare = tmp_path / "bare"
    bare.mkdir()
    for p in ds.glob("*.tar"):
        (bare / p.name).symlink_to(p)
    manifest = json.loads((ds / "index.json").read_text())
    del manifest["sample_offsets"]
    (bare / "index.json").write_text(json.dumps(manifest))

    def keys(src: Path) -> list[str]:
        loader = make_loader(str(src), 4, image_size=16, num_workers=2, seed=1)
        return [k for b in loader for k in b["keys"]]

    assert keys(ds) == keys(bare) and len(keys(ds)) == 23


def test_verify_checks_the_offsets_file(packed, tmp_path: Path) -> None:
    """`wdstool verify` reads every shard: each sample must start where the offsets file says;
    a file that lies, or is missing, is named."""
    import shutil

    from shard_writer.verify import verify_dataset

    _tree, ds = packed
    copy = tmp_path / "ds"
    shutil.copytree(ds, copy)
    assert verify_dataset(str(copy))["num_samples"] == 23
    flat = np.load(copy / OFFSETS_NAME)
    flat[3] += 512
    np.save(copy / OFFSETS_NAME, flat)
    with pytest.raises(ShardError, match=r"train-000000\.tar: sample '.*' starts at byte \d+, "):
        verify_dataset(str(copy))
    (copy / OFFSETS_NAME).unlink()
    with pytest.raises(ShardError, match=r"index\.offsets\.npy: the manifest names this offsets"):
        verify_dataset(str(copy))
