"""A rerun after an interruption reuses a complete shard only when its size and sha256 match its
marker (README: "reusing complete shards (size and sha256 checked)"); anything else is rewritten.

The interrupted state is the one a ``kill -9`` leaves between the last shard and the manifest:
every shard and its marker in place, the pack's state file, no ``index.json``.
"""

from __future__ import annotations

import json
import logging
import shutil
import tarfile
from pathlib import Path

import pytest

from shard_writer.dest import STATE_DIR
from shard_writer.pack import PackOptions, pack
from shard_writer.publish import STATE_NAME
from shard_writer.write import ShardOutcome, marker_name
from tests.conftest import dir_bytes, make_tree
from wdstool.base.errors import DestinationError

OPTIONS = PackOptions(workers=1, max_count=4)


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> tuple[Path, Path]:
    """(source tree, a complete pack of it): 10 samples in 3 shards."""
    root = tmp_path_factory.mktemp("reuse")
    src = make_tree(root / "src", {"a": 5, "b": 5}, seed=13)
    ref = root / "ref"
    pack(str(src), str(ref), OPTIONS)
    return src, ref


def _interrupted(ref: Path, dest: Path) -> list[dict]:
    """``dest``: the shards of ``ref`` with their markers, the state file, no manifest."""
    shutil.copytree(ref, dest)
    manifest = json.loads((dest / "index.json").read_text())
    (dest / "index.json").unlink()
    (dest / STATE_DIR).mkdir()
    (dest / STATE_NAME).write_text(json.dumps({"fingerprint": manifest["fingerprint"]}))
    for e in manifest["shardlist"]:
        outcome = ShardOutcome(
            name=e["url"], nsamples=e["nsamples"], filesize=e["filesize"], sha256=e["sha256"],
            source_bytes=1,
        )  # fmt: skip
        (dest / marker_name(e["url"])).write_text(json.dumps(outcome.to_json()))
    return manifest["shardlist"]


def _first_jpeg(shard: Path) -> tuple[int, int]:
    with tarfile.open(shard) as tf:
        m = next(m for m in tf.getmembers() if m.name.endswith(".jpg"))
    return m.offset_data, m.size


def test_untouched_shards_are_reused(packed, tmp_path: Path) -> None:
    src, ref = packed
    entries = _interrupted(ref, tmp_path / "out")
    summary = pack(str(src), str(tmp_path / "out"), OPTIONS)
    assert (summary.reused_shards, summary.written_shards) == (len(entries), 0) == (3, 0)
    assert summary.samples == 10 and not summary.up_to_date
    assert dir_bytes(tmp_path / "out") == dir_bytes(ref)
    assert not (tmp_path / "out" / STATE_DIR).exists()


def test_same_size_tampered_shard_with_valid_marker_is_rewritten(
    packed, tmp_path: Path, caplog
) -> None:
    src, ref = packed
    dest = tmp_path / "out"
    entries = _interrupted(ref, dest)
    shard = dest / entries[1]["url"]
    at, size = _first_jpeg(shard)
    data = bytearray(shard.read_bytes())
    data[at + size // 2 : at + size // 2 + 16] = bytes(16)  # same size, other content
    shard.write_bytes(bytes(data))
    assert shard.stat().st_size == entries[1]["filesize"]
    with caplog.at_level(logging.WARNING, logger="shard_writer.publish"):
        summary = pack(str(src), str(dest), OPTIONS)
    assert (summary.reused_shards, summary.written_shards) == (2, 1)
    assert dir_bytes(dest) == dir_bytes(ref)  # the tampered shard is the original again
    warned = [r.getMessage() for r in caplog.records]
    assert any(str(shard) in w and "content differs from its marker" in w for w in warned)


@pytest.mark.parametrize("damage", ["shorter", "longer", "no marker", "bad marker", "no shard"])
def test_shard_or_marker_that_disagree_is_rewritten(packed, tmp_path: Path, damage: str) -> None:
    src, ref = packed
    dest = tmp_path / "out"
    entries = _interrupted(ref, dest)
    shard, marker = dest / entries[2]["url"], dest / marker_name(entries[2]["url"])
    if damage == "shorter":
        shard.write_bytes(shard.read_bytes()[:-512])
    elif damage == "longer":
        shard.write_bytes(shard.read_bytes() + bytes(512))
    elif damage == "no marker":
        marker.unlink()
    elif damage == "bad marker":
        marker.write_text(json.dumps({"name": entries[2]["url"], "nsamples": "many"}))
    else:
        shard.unlink()
    summary = pack(str(src), str(dest), OPTIONS)
    assert (summary.reused_shards, summary.written_shards) == (2, 1)
    assert dir_bytes(dest) == dir_bytes(ref)


def test_interrupted_pack_of_another_source_is_refused(packed, tmp_path: Path) -> None:
    _, ref = packed
    dest = tmp_path / "out"
    _interrupted(ref, dest)
    other = make_tree(tmp_path / "other", {"a": 5, "b": 5}, seed=14)
    with pytest.raises(DestinationError, match="an interrupted pack of a different source") as info:
        pack(str(other), str(dest), OPTIONS)
    assert str(dest) in info.value.message and "--overwrite" in info.value.message
    assert (dest / STATE_NAME).exists() and not (dest / "index.json").exists()  # left as it was
