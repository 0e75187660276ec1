"""Hostile and broken shards through the user-facing paths: make_loader, inspect, verify."""

from __future__ import annotations

import io
import json
import os
import pickle
import random
import shutil
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from loaders import make_loader
from shard_writer.pack import PackOptions, pack
from shard_writer.verify import inspect_dataset, verify_dataset
from tests.conftest import jpeg_bytes, make_tree, run_cli
from tests.faults.conftest import runs
from tests.support.tars import add, sample
from wdstool.base.errors import WdsToolError


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("faults")
    src = make_tree(root / "src", {"a": 10, "b": 10, "c": 10}, seed=13)
    dest = root / "shards"
    pack(str(src), str(dest), PackOptions(workers=1, max_count=10))
    return dest


def _copy(packed: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "ds"
    shutil.copytree(packed, dest)
    return dest


def _keys(source, *, on_error: str = "raise", workers: int = 0) -> tuple[list[str], int]:
    loader = make_loader(
        source, 4, image_size=16, num_workers=workers, on_error=on_error, seed=1, shuffle=False
    )
    keys = [k for b in loader for k in b["keys"]]
    return keys, loader.num_replaced


def _all_keys(packed: Path) -> list[str]:
    return _keys(packed)[0]


def _member(shard: Path, suffix: str, index: int = 0) -> tarfile.TarInfo:
    with tarfile.open(shard) as tf:
        return [m for m in tf.getmembers() if m.name.endswith(suffix)][index]


def _error(fn) -> str:
    with pytest.raises(WdsToolError) as info:
        fn()
    return info.value.message


# --- broken data ---------------------------------------------------------------------------
def test_corrupt_image_inside_a_shard(packed: Path, tmp_path: Path, record) -> None:
    ds = _copy(packed, tmp_path)
    shard = ds / "train-000001.tar"
    m = _member(shard, ".jpg", 3)
    data = bytearray(shard.read_bytes())
    data[m.offset_data : m.offset_data + m.size] = b"\x00" * m.size  # same size, not a JPEG
    shard.write_bytes(bytes(data))
    bad_key = m.name.rsplit(".", 1)[0]
    rec = record("corrupt image in a shard (raise)")
    rec.clear_error(_error(lambda: _keys(ds)), (str(shard), "train-000001.tar"))
    assert bad_key in _error(lambda: _keys(ds))
    keys, replaced = _keys(ds, on_error="skip", workers=2)
    want = _all_keys(packed)
    assert replaced == 1 and len(keys) == len(want)
    lost = set(want) - set(keys)
    assert lost == {bad_key}  # the bad one is replaced by another sample of the same worker
    record("corrupt image in a shard (skip)").recovered(duplicates=len(keys) - len(set(keys)) - 1)


def test_tar_cut_at_random_offsets(packed: Path, tmp_path: Path, record) -> None:
    rng = random.Random(7)
    size = (packed / "train-000001.tar").stat().st_size
    rec_loader = record("shard cut at a random offset: loader")
    rec_verify = record("shard cut at a random offset: verify")
    offsets = [512, 511, 1024] + [rng.randrange(1, size - 1) for _ in range(runs(6))]
    for cut in offsets:
        ds = tmp_path / f"cut{cut}"
        shutil.copytree(packed, ds)
        shard = ds / "train-000001.tar"
        shard.write_bytes(shard.read_bytes()[:cut])
        try:
            keys, _ = _keys(ds)
        except WdsToolError as exc:
            rec_loader.clear_error(exc.message, "train-000001.tar")
        else:  # a cut inside the end-of-archive padding loses nothing
            assert keys == _all_keys(packed), cut
            rec_loader.recovered()
        rec_verify.clear_error(_error(lambda ds=ds: verify_dataset(str(ds))), "train-000001.tar")


def test_zero_byte_and_missing_shards(packed: Path, tmp_path: Path, record) -> None:
    ds = _copy(packed, tmp_path)
    (ds / "train-000000.tar").write_bytes(b"")
    record("zero-byte shard").clear_error(_error(lambda: _keys(ds)), "train-000000.tar")
    (ds / "train-000000.tar").unlink()
    msg = _error(lambda: _keys(ds))
    assert "not found" in msg
    record("shard missing from storage").clear_error(msg, "train-000000.tar")
    record("shard missing from storage").clear_error(
        _error(lambda: verify_dataset(str(ds))), "train-000000.tar"
    )


def test_manifest_disagreeing_with_shards(packed: Path, tmp_path: Path, record) -> None:
    ds = _copy(packed, tmp_path)
    manifest = json.loads((ds / "index.json").read_text())
    manifest["shardlist"][1]["nsamples"] += 3
    (ds / "index.json").write_text(json.dumps(manifest))
    rec = record("manifest counts/hashes disagree")
    msg = _error(lambda: _keys(ds))
    assert "manifest promised" in msg
    rec.clear_error(msg, "train-000001.tar")
    rec.clear_error(_error(lambda: verify_dataset(str(ds))), "train-000001.tar")
    manifest["shardlist"][1]["nsamples"] -= 3
    manifest["shardlist"][2]["sha256"] = "0" * 64
    (ds / "index.json").write_text(json.dumps(manifest))
    msg = _error(lambda: verify_dataset(str(ds)))
    assert "sha256 mismatch" in msg
    rec.clear_error(msg, "train-000002.tar")


# --- hostile members ------------------------------------------------------------------------
def _shard(path: Path, build) -> str:
    with tarfile.open(
        path, "w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape"
    ) as tf:
        build(tf)
    return str(path)


def test_links_devices_absolute_and_parent_paths_are_never_followed(tmp_path: Path, record) -> None:
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(jpeg_bytes(99))

    def build(tf):
        sample(tf, "ok0", 1)
        add(tf, "link.jpg", b"", tarfile.SYMTYPE, linkname=str(secret))
        add(tf, "link.cls", b"0")
        add(tf, "hard.jpg", b"", tarfile.LNKTYPE, linkname="ok0.jpg")
        add(tf, "dev.jpg", b"", tarfile.CHRTYPE, devmajor=1, devminor=3)
        add(tf, "fifo.jpg", b"", tarfile.FIFOTYPE)
        add(tf, "/etc/abs.jpg", jpeg_bytes(3))
        add(tf, "/etc/abs.cls", b"1")
        add(tf, "../../up.jpg", jpeg_bytes(4))
        add(tf, "../../up.cls", b"1")
        sample(tf, "ok1", 2)

    url = _shard(tmp_path / "hostile-000000.tar", build)
    cwd_before = set(os.listdir(tmp_path))
    loader = make_loader(url, 2, image_size=16, num_workers=0, shuffle=False, on_error="skip")
    keys = [k for b in loader for k in b["keys"]]
    # links and devices carry no data and are never opened: the samples named after them have no
    # image, so they are replaced; absolute and ../ names are only keys (nothing is extracted)
    assert {"ok0", "ok1", "/etc/abs", "../../up"} <= set(keys)
    assert loader.num_replaced == 1  # "link" (a .cls with a link as image) has no image
    assert set(os.listdir(tmp_path)) == cwd_before
    assert not Path("/etc/abs.jpg").exists()
    record("links, devices, absolute and ../ member names").recovered()


def test_enormous_member_header_fails_fast_without_allocating(tmp_path: Path, record) -> None:
    def build(tf):
        sample(tf, "ok0", 1)
        info = tarfile.TarInfo("huge.jpg")
        info.size = 1 << 40  # 1 TiB claimed, nothing follows
        tf.fileobj.write(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))

    url = _shard(tmp_path / "huge-000000.tar", build)
    tracemalloc.start()
    try:
        msg = _error(lambda: _keys(url))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20, peak
    assert "declares" in msg or "truncated" in msg
    record("tar header claiming an enormous member").clear_error(msg, "huge-000000.tar")


def test_duplicate_keys_keyless_members_label_only_and_non_utf8(tmp_path: Path, record) -> None:
    bad_name = b"caf\xe9-\xff".decode("utf-8", "surrogateescape")

    def build(tf):
        sample(tf, "dup", 1)
        sample(tf, "mid", 2)
        sample(tf, "dup", 3)  # not consecutive: a second sample with the same key
        add(tf, ".jpg", jpeg_bytes(5))  # no key: skipped
        add(tf, "noext", b"x")  # no extension: skipped
        add(tf, "lonely.cls", b"1")  # a label without an image
        sample(tf, bad_name, 6)

    url = _shard(tmp_path / "odd-000000.tar", build)
    msg = _error(lambda: _keys(url))
    assert "lonely" in msg and "no image member" in msg
    record("label-only sample (raise)").clear_error(msg, "odd-000000.tar")
    keys, replaced = _keys(url, on_error="skip")
    # both stored "dup" samples come, plus "dup" again in place of the label-only "lonely" (the
    # last good sample of the worker replaces a bad one)
    assert keys == ["dup", "mid", "dup", "dup", bad_name] and replaced == 1
    record("duplicate keys, keyless members, non-UTF-8 names (skip)").recovered()


def test_image_bomb_is_refused_before_decoding(tmp_path: Path, record) -> None:
    from tests.shard_writer.test_bad_input import _png_claiming

    def build(tf):
        sample(tf, "ok0", 1)
        add(tf, "bomb.png", _png_claiming(60_000, 60_000))
        add(tf, "bomb.cls", b"0")

    url = _shard(tmp_path / "bomb-000000.tar", build)
    tracemalloc.start()
    try:
        msg = _error(lambda: _keys(url))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100 << 20
    assert "bomb" in msg
    record("image bomb (60,000 x 60,000 declared)").clear_error(msg, "bomb-000000.tar")


class _Trace:
    """Unpickling this creates ``path``: proof that something unpickled it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_pickle_members_are_never_unpickled(packed: Path, tmp_path: Path, record) -> None:
    ds = _copy(packed, tmp_path)
    marker = tmp_path / "UNPICKLED"
    payload = pickle.dumps(_Trace(str(marker)))
    assert not marker.exists()
    shard = ds / "train-000000.tar"
    with tarfile.open(shard) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    first_key = members[0][0].name.rsplit(".", 1)[0]
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tf:
        for m, data in members:
            tf.addfile(m, io.BytesIO(data))
            if m.name == f"{first_key}.json":
                for ext in ("pkl", "pth", "pyd", "pickle"):
                    add(tf, f"{first_key}.{ext}", payload)
    manifest = json.loads((ds / "index.json").read_text())
    import hashlib

    manifest["shardlist"][0]["filesize"] = shard.stat().st_size
    manifest["shardlist"][0]["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    (ds / "index.json").write_text(json.dumps(manifest))
    rec = record("pickle members (.pkl/.pth/.pyd) with a payload")
    keys, _ = _keys(ds, workers=2)
    assert keys == _keys(packed, workers=2)[0]
    inspect_dataset(str(ds))
    verify_dataset(str(ds), decode=True)
    run_cli("stream-bench", str(ds), "--workers", "0", "--repeats", "1", "--image-size", "16", "-q")
    if marker.exists():
        rec.unpickled()
    assert not marker.exists()
    rec.recovered()
