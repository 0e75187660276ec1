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
import time
from dataclasses import replace
from pathlib import Path

import pytest

from shard_writer.dest import STATE_DIR, Destination
from shard_writer.layout import ShardSpec
from shard_writer.pack import PackOptions, pack
from shard_writer.publish import STATE_NAME, fingerprint, prepare_dest
from shard_writer.scan import Scan, SourceFile
from shard_writer.write import ShardOutcome, marker_name
from tests.conftest import dir_bytes, make_tree
from tests.support.countproxy import CountingProxy
from wdstool.base.errors import DestinationError, ShardError
from wdstool.format.tar_index import scan_shard

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
    assert warned == [f"{shard}: content differs from its marker; rewriting"]


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
    assert str(dest) in info.value.message and "overwrite=True" in info.value.message
    assert (dest / STATE_NAME).exists() and not (dest / "index.json").exists()  # left as it was


def test_rerun_of_a_complete_pack_reports_it_unchanged(packed, tmp_path: Path) -> None:
    src, ref = packed
    dest = tmp_path / "out"
    shutil.copytree(ref, dest)
    manifest = json.loads((dest / "index.json").read_text())
    summary = pack(str(src), str(dest), OPTIONS)
    assert summary.up_to_date and 0 <= summary.seconds <= time.perf_counter()
    assert (summary.dest, summary.shards, summary.samples, summary.classes) == (str(dest), 3, 10, 2)
    assert summary.total_bytes == sum(e["filesize"] for e in manifest["shardlist"])
    assert (summary.reused_shards, summary.written_shards, summary.source_bytes) == (3, 0, 0)
    assert summary.skipped == [] and summary.workers == 1
    assert dir_bytes(dest) == dir_bytes(ref)
    shard = dest / manifest["shardlist"][2]["url"]
    shard.write_bytes(shard.read_bytes()[:-512])
    with pytest.raises(ShardError) as info:
        pack(str(src), str(dest), OPTIONS)
    assert info.value.message == (
        f"{shard}: missing or wrong size although index.json lists it; run `wdstool verify`, "
        "or pack again with overwrite=True"
    )


def _spec(name: str, *files: SourceFile) -> ShardSpec:
    return ShardSpec(
        index=0, name=name, samples=files, infos=(), keys=tuple(f"k{f.index}" for f in files),
        size_bound=0,
    )  # fmt: skip


def test_fingerprint_covers_every_input_of_the_layout() -> None:
    files = (SourceFile(0, "a/1.jpg", 0, 100), SourceFile(1, "b/2.jpg", 1, 200))
    scan = Scan(root="/src", classes=("a", "b"), files=files, problems=())
    base = fingerprint(scan, (_spec("t-0.tar", *files),), OPTIONS)
    assert len(base) == 64 and base == fingerprint(scan, (_spec("t-0.tar", *files),), OPTIONS)
    f0 = files[0]
    variants = {
        "options": fingerprint(scan, (_spec("t-0.tar", *files),), PackOptions(max_count=5)),
        "classes": fingerprint(
            replace(scan, classes=("a", "c")), (_spec("t-0.tar", *files),), OPTIONS
        ),
        "shard name": fingerprint(scan, (_spec("t-1.tar", *files),), OPTIONS),
        "shards": fingerprint(scan, (_spec("t-0.tar", f0), _spec("t-1.tar", files[1])), OPTIONS),
        "path": fingerprint(
            scan, (_spec("t-0.tar", replace(f0, relpath="a/9.jpg"), files[1]),), OPTIONS
        ),
        "size": fingerprint(scan, (_spec("t-0.tar", replace(f0, size=101), files[1]),), OPTIONS),
        "label": fingerprint(
            scan, (_spec("t-0.tar", replace(f0, class_idx=1), files[1]),), OPTIONS
        ),
        "key": fingerprint(scan, (_spec("t-0.tar", replace(f0, index=7), files[1]),), OPTIONS),
        "caption": fingerprint(
            scan, (_spec("t-0.tar", replace(f0, caption="x"), files[1]),), OPTIONS
        ),
        "extra": fingerprint(
            scan, (_spec("t-0.tar", replace(f0, extra='{"a":1}'), files[1]),), OPTIONS
        ),
        "order": fingerprint(scan, (_spec("t-0.tar", files[1], f0),), OPTIONS),
    }
    assert base not in variants.values()
    assert len(set(variants.values())) == len(variants)


@pytest.mark.slow
def test_on_s3_the_etag_stands_for_the_bytes(packed, s3_server, s3_bucket: str) -> None:
    """On an object store the marker's ETag is compared, not the bytes (nothing is downloaded
    for a match); a same-size object with another ETag is hashed, found different, rewritten;
    a missing or resized one is rewritten."""
    src, ref = packed
    url = f"s3://{s3_bucket}/ds"
    opts = s3_server.storage_options
    pack(str(src), url, OPTIONS, storage_options=opts)
    client = s3_server.client()
    manifest = json.loads((ref / "index.json").read_text())
    names = [e["url"] for e in manifest["shardlist"]]

    def interrupt() -> None:
        client.delete_object(Bucket=s3_bucket, Key="ds/index.json")
        state = json.dumps({"fingerprint": manifest["fingerprint"]})
        client.put_object(Bucket=s3_bucket, Key=f"ds/{STATE_NAME}", Body=state)
        for e in manifest["shardlist"]:
            etag = client.head_object(Bucket=s3_bucket, Key=f"ds/{e['url']}")["ETag"]
            with open(ref / e["url"], "rb") as f:  # the marker says where its samples lie
                offsets = scan_shard(f, e["url"]).offsets
            outcome = ShardOutcome(
                name=e["url"], nsamples=e["nsamples"], filesize=e["filesize"],
                sha256=e["sha256"], source_bytes=1, etag=etag, offsets=offsets,
            )  # fmt: skip
            body = json.dumps(outcome.to_json())
            client.put_object(Bucket=s3_bucket, Key=f"ds/{marker_name(e['url'])}", Body=body)

    def stored() -> dict[str, bytes]:
        return {
            n: client.get_object(Bucket=s3_bucket, Key=f"ds/{n}")["Body"].read()
            for n in [*names, "index.json"]
        }

    interrupt()
    with CountingProxy(s3_server.endpoint_url) as proxy:
        counted = {**opts, "endpoint_url": proxy.endpoint_url}
        summary = pack(str(src), url, OPTIONS, storage_options=counted)
        shard_gets = proxy.gets(".tar")
    assert (summary.reused_shards, summary.written_shards) == (3, 0)
    assert sum(shard_gets.values()) == 0, shard_gets  # the ETags matched: nothing downloaded
    assert stored() == {n: (ref / n).read_bytes() for n in [*names, "index.json"]}
    interrupt()
    original = (ref / names[0]).read_bytes()
    client.put_object(Bucket=s3_bucket, Key=f"ds/{names[0]}", Body=bytes(len(original)))
    client.delete_object(Bucket=s3_bucket, Key=f"ds/{names[1]}")
    client.put_object(Bucket=s3_bucket, Key=f"ds/{names[2]}", Body=b"short")
    summary = pack(str(src), url, OPTIONS, storage_options=opts)
    assert (summary.reused_shards, summary.written_shards) == (0, 3)
    assert stored() == {n: (ref / n).read_bytes() for n in [*names, "index.json"]}


def test_overwrite_removes_only_this_packs_files(packed, tmp_path: Path) -> None:
    src, ref = packed
    dest = tmp_path / "out"
    other = make_tree(tmp_path / "other", {"a": 9, "b": 9}, seed=15)
    pack(str(other), str(dest), PackOptions(workers=1, max_count=2))  # 9 shards
    (dest / "notes.txt").write_text("mine")
    (dest / "val-000000.tar").write_bytes(b"other prefix")
    (dest / "other.tar").write_bytes(b"not ours")
    with pytest.raises(DestinationError) as info:
        pack(str(src), str(dest), OPTIONS)
    assert info.value.message == (
        f"{dest}: destination already holds a different dataset; use overwrite=True to replace "
        "it, or choose another DEST"
    )
    summary = pack(str(src), str(dest), replace(OPTIONS, overwrite=True))
    assert (summary.shards, summary.written_shards) == (3, 3)
    names = sorted(p.name for p in dest.iterdir())
    assert names == sorted(
        [
            "index.json",
            "index.offsets.npy",
            "notes.txt",
            "other.tar",
            "val-000000.tar",
            *(p.name for p in ref.glob("*.tar")),
        ]
    )  # the 6 stale train shards are gone, nothing else
    assert (dest / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("left", ["state only", "manifest only", "shards only"])
def test_what_another_pack_left_is_named(packed, tmp_path: Path, left: str) -> None:
    src, _ = packed
    dest = tmp_path / "out"
    other = make_tree(tmp_path / "other", {"a": 3}, seed=16)
    pack(str(other), str(dest), OPTIONS)
    if left == "state only":
        (dest / "index.json").unlink()
        (dest / STATE_DIR).mkdir()
        (dest / STATE_NAME).write_text(json.dumps({"fingerprint": "f" * 64}))
    if left != "shards only":
        for p in dest.glob("*.tar"):
            p.unlink()
    else:
        (dest / "index.json").unlink()
    what = {
        "state only": "an interrupted pack of a different source or options",
        "manifest only": "a different dataset",
        "shards only": "shards named train-*.tar",
    }[left]
    with pytest.raises(DestinationError) as info:
        pack(str(src), str(dest), OPTIONS)
    assert info.value.message == (
        f"{dest}: destination already holds {what}; use overwrite=True to replace it, or choose "
        "another DEST"
    )


def test_a_fresh_pack_records_its_fingerprint_and_clears_old_temporaries(
    tmp_path: Path, caplog
) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / ".train-000000.tar.tmp-123").write_bytes(b"half")
    (dest / "other.tar").write_bytes(b"not ours")  # a .tar without our prefix: no objection
    with caplog.at_level(logging.INFO, logger="shard_writer.publish"):
        assert prepare_dest(Destination(str(dest)), "ab" * 32, OPTIONS) is None
    assert json.loads((dest / STATE_NAME).read_text()) == {"fingerprint": "ab" * 32}
    assert not (dest / ".train-000000.tar.tmp-123").exists()
    assert [r.getMessage() for r in caplog.records] == [
        "removed stale temporary file .train-000000.tar.tmp-123"
    ]


def test_a_complete_pack_with_a_broken_manifest_is_named(packed, tmp_path: Path) -> None:
    src, ref = packed
    dest = tmp_path / "out"
    shutil.copytree(ref, dest)
    raw = json.loads((dest / "index.json").read_text())
    (dest / "index.json").write_text(json.dumps({**raw, "shardlist": "gone"}))
    with pytest.raises(ShardError) as info:
        pack(str(src), str(dest), OPTIONS)
    assert info.value.message == (
        f"{dest}/index.json: malformed manifest: field 'shardlist' has the wrong type"
    )


def test_fingerprint_of_undecodable_names() -> None:
    f = SourceFile(0, "a/\udcff.jpg", 0, 100)  # a non-UTF-8 file name, as os.listdir gives it
    scan = Scan(root="/src", classes=("a",), files=(f,), problems=())
    assert len(fingerprint(scan, (_spec("t-0.tar", f),), OPTIONS)) == 64


def test_overwrite_clears_the_old_manifest_and_markers_first(packed, tmp_path: Path) -> None:
    """Before anything new is written: a pack that then fails leaves no manifest naming the old
    shards, and no marker that could vouch for a file of the same name."""
    _, ref = packed
    dest = tmp_path / "out"
    entries = _interrupted(ref, dest)
    shutil.copy(ref / "index.json", dest / "index.json")
    assert prepare_dest(Destination(str(dest)), "0" * 64, replace(OPTIONS, overwrite=True)) is None
    assert not (dest / "index.json").exists() and not list(dest.glob("*.tar"))
    assert [p.name for p in (dest / STATE_DIR).iterdir()] == ["state.json"]
    assert not (dest / marker_name(entries[0]["url"])).exists()
