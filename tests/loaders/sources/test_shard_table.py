"""A large manifest read once per host (loaders/source_table.py, wdstool/format/shard_table.py):
the first loader parses ``index.json`` and keeps its shard table in the cache; later loaders of
that host map the table and never parse the manifest, and deliver exactly what the manifest
says; a rewritten manifest (local or on S3) gets a new table; a damaged table is ignored.
``MIN_SHARDS`` is lowered so that real packs of a few shards take the table path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import loaders.source_table as source_table
import wdstool.format.indexes as indexes
from loaders import make_loader
from shard_writer.pack import PackOptions, pack
from tests.conftest import make_tree
from wdstool.format.manifest import Manifest, ShardEntry
from wdstool.format.shard_table import SIDE_NAME, load_table, table_of


@pytest.fixture
def small_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_table, "MIN_SHARDS", 1)


def _packed(root: Path, per_shard: int = 5, seed: int = 0) -> Path:
    src = make_tree(root / "src", {"a": 7, "b": 6}, seed=seed)
    pack(str(src), str(root / "shards"), PackOptions(workers=1, max_count=per_shard))
    return root / "shards"


def _epoch(loader) -> list[tuple[list[str], np.ndarray]]:
    return [(list(b["keys"]), b["pixel_values"].numpy().copy()) for b in loader]


def _tables(cache: Path) -> list[Path]:
    folder = cache / "tables"
    return (
        sorted(p for p in folder.iterdir() if p.name.startswith("table-") and p.is_dir())
        if folder.exists()
        else []
    )


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a, **k):
        raise AssertionError("the manifest was parsed")

    monkeypatch.setattr(indexes, "find_index", refuse)


def test_the_second_loader_maps_the_table_and_delivers_the_same(
    small_tables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shards, cache = _packed(tmp_path), tmp_path / "cache"
    kw = {"image_size": 16, "seed": 3, "cache_dir": str(cache), "label": None}
    first = make_loader(shards, 4, **kw)
    want, n = _epoch(first), len(first)
    assert len(_tables(cache)) == 1
    with monkeypatch.context() as m:
        _no_parse(m)
        again = make_loader(shards, 4, **kw)
        assert list(again.dataset.sources[0].index.urls) == list(
            first.dataset.sources[0].index.urls
        )
        got = _epoch(again)
        assert len(again) == n == len(got)
        assert [k for k, _ in got] == [k for k, _ in want]
        assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, want, strict=True))
        assert again.state_dict() == first.state_dict()  # the same data set identity
        # two ranks from the table: equal batch counts, every sample (13: one padding repeat)
        ranks = [make_loader(shards, 2, rank=r, world_size=2, **kw) for r in range(2)]
        keys = [[k for b in r for k in b["keys"]] for r in ranks]
        assert len(ranks[0]) == len(ranks[1]) and len(keys[0]) == len(keys[1]) == 7
        assert set(keys[0] + keys[1]) == {k for ks, _ in want for k in ks}


def test_a_rewritten_manifest_gets_a_new_table(small_tables, tmp_path: Path) -> None:
    shards, cache = _packed(tmp_path), tmp_path / "cache"
    kw = {"image_size": 16, "cache_dir": str(cache), "label": None}
    assert len(make_loader(shards, 1, **kw)) == 13
    manifest = json.loads((shards / "index.json").read_text())
    manifest["shardlist"] = manifest["shardlist"][:1]  # now one shard of 5 samples
    manifest["fingerprint"] = "another"
    (shards / "index.json").write_text(json.dumps(manifest))
    assert len(make_loader(shards, 1, **kw)) == 5
    assert len(_tables(cache)) == 2


def test_a_damaged_table_is_ignored_and_small_manifests_keep_none(
    small_tables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shards, cache = _packed(tmp_path), tmp_path / "cache"
    kw = {"image_size": 16, "cache_dir": str(cache), "label": None}
    want = [list(b["keys"]) for b in make_loader(shards, 4, **kw)]
    (table,) = _tables(cache)
    np.save(table / "nsamples.npy", np.array([1, 2], dtype=np.int64))  # rows no longer agree
    assert load_table(table) is None
    assert [list(b["keys"]) for b in make_loader(shards, 4, **kw)] == want
    monkeypatch.setattr(source_table, "MIN_SHARDS", 10_000)
    other = tmp_path / "other"
    make_loader(_packed(other, seed=1), 4, image_size=16, cache_dir=str(other / "c"), label=None)
    assert _tables(other / "c") == []


def test_at_most_keep_tables_are_kept(
    small_tables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source_table, "KEEP", 2)
    cache = tmp_path / "cache"
    for i in range(3):
        shards = _packed(tmp_path / f"d{i}", seed=i)
        make_loader(shards, 4, image_size=16, cache_dir=str(cache), label=None)
    assert len(_tables(cache)) == 2


def test_on_s3_the_etag_tells_a_new_manifest(
    small_tables, tmp_path: Path, s3_server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shards, cache = _packed(tmp_path), tmp_path / "cache"
    client = s3_server.client()
    for f in shards.iterdir():
        client.put_object(Bucket=s3_bucket, Key=f"ds/{f.name}", Body=f.read_bytes())
    url = f"s3://{s3_bucket}/ds"
    kw = {
        "image_size": 16,
        "cache_dir": str(cache),
        "label": None,
        "storage_options": s3_server.storage_options,
    }
    want = [list(b["keys"]) for b in make_loader(url, 4, **kw)]
    assert len(_tables(cache)) == 1
    with monkeypatch.context() as m:
        _no_parse(m)
        assert [list(b["keys"]) for b in make_loader(url, 4, **kw)] == want
    manifest = json.loads((shards / "index.json").read_text())
    manifest["shardlist"] = manifest["shardlist"][1:]
    manifest["fingerprint"] = "another"
    client.put_object(Bucket=s3_bucket, Key="ds/index.json", Body=json.dumps(manifest).encode())
    assert len(make_loader(url, 1, **kw)) == 13 - 5
    assert len(_tables(cache)) == 2


def test_offsets_and_facts_stay_in_the_manifest() -> None:
    plain = Manifest(shards=(ShardEntry("a.tar", 3, 10, "x" * 64), ShardEntry("b.tar", 2, -1, "")))
    table = table_of(plain, "id")
    assert table is not None and len(table) == 2 and table.name(1) == "b.tar"
    assert table.nsamples.tolist() == [3, 2] and table.filesize.tolist() == [10, -1]
    assert table.sha256.tolist() == [b"x" * 64, b""]
    with_offsets = Manifest(shards=(ShardEntry("a.tar", 1, 10, "", (0,)),))
    assert table_of(with_offsets, "id") is None


def test_a_cache_that_cannot_be_written_is_no_error(small_tables, tmp_path: Path) -> None:
    shards = _packed(tmp_path)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    loader = make_loader(shards, 4, image_size=16, cache_dir=str(blocked), label=None)
    assert len(loader) == 4
    shutil.rmtree(tmp_path / "src")


def _rank_len(shards: str, cache: str, out) -> None:  # in a forked process
    out.put(len(make_loader(shards, 2, image_size=16, cache_dir=cache, label=None)))


def test_the_ranks_of_a_host_parse_a_large_manifest_once(
    small_tables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three processes start together: one parses the manifest and keeps the table while the
    others wait on the host's lock, then map the table."""
    import multiprocessing as mp
    import time

    monkeypatch.setattr(source_table, "LOCK_BYTES", 0)
    shards, cache, log = _packed(tmp_path), tmp_path / "cache", tmp_path / "parses"

    def counting(real):
        def parse(*a, **k):
            with open(log, "a") as f:
                f.write("x")
            time.sleep(0.5)  # the others arrive while it parses
            return real(*a, **k)

        return parse

    # the manifest is parsed, or streamed into arrays (manifest_stream): either is a parse
    monkeypatch.setattr(indexes, "find_index", counting(indexes.find_index))
    monkeypatch.setattr(source_table, "stream_table", counting(source_table.stream_table))
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank_len, args=(str(shards), str(cache), out)) for _ in range(3)]
    for p in procs:
        p.start()
    lens = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    assert lens == [7, 7, 7] and log.read_text() == "x"


@pytest.fixture
def side_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """pack writes the side file for any number of shards; the loader looks for it at any
    manifest size."""
    import wdstool.format.shard_table as shard_table

    monkeypatch.setattr(shard_table, "SIDE_MIN_SHARDS", 1)
    monkeypatch.setattr(source_table, "LOCK_BYTES", 0)


def test_a_small_pack_writes_no_side_file(tmp_path: Path) -> None:
    assert not (_packed(tmp_path) / SIDE_NAME).exists()


def test_the_hosts_first_rank_reads_the_side_file_not_the_manifest(
    side_files, small_tables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shards = _packed(tmp_path)
    side = shards / SIDE_NAME
    assert side.exists()
    kw = {"image_size": 16, "seed": 5, "label": None}
    away = side.rename(tmp_path / "away.npz")  # the manifest's own way
    want = _epoch(make_loader(shards, 4, cache_dir=str(tmp_path / "a"), **kw))
    away.rename(side)
    with monkeypatch.context() as m:
        _no_parse(m)
        got = _epoch(make_loader(shards, 4, cache_dir=str(tmp_path / "b"), **kw))
    assert [k for k, _ in got] == [k for k, _ in want]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, want, strict=True))
    assert len(_tables(tmp_path / "b")) == 1  # kept for the host's other ranks


def test_a_side_file_of_another_manifest_is_ignored(
    side_files, small_tables, tmp_path: Path
) -> None:
    shards = _packed(tmp_path)
    manifest = json.loads((shards / "index.json").read_text())
    manifest["shardlist"] = manifest["shardlist"][:2]  # edited by hand: 10 samples, not 13
    manifest["num_shards"], manifest["num_samples"] = 2, 10
    (shards / "index.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    loader = make_loader(shards, 1, image_size=16, cache_dir=str(tmp_path / "c"), label=None)
    assert len(loader) == 10  # the fingerprint still matches, the counts do not: parsed


def test_on_s3_the_side_file_is_read_with_a_ranged_head(
    side_files, small_tables, tmp_path: Path, s3_server, s3_bucket: str, monkeypatch
) -> None:
    shards = _packed(tmp_path)
    client = s3_server.client()
    for f in shards.iterdir():
        client.put_object(Bucket=s3_bucket, Key=f"side/{f.name}", Body=f.read_bytes())
    kw = {"image_size": 16, "label": None, "storage_options": s3_server.storage_options}
    want = [list(b["keys"]) for b in make_loader(shards, 4, cache_dir=str(tmp_path / "a"), **kw)]
    with monkeypatch.context() as m:
        _no_parse(m)
        url = f"s3://{s3_bucket}/side"
        got = [list(b["keys"]) for b in make_loader(url, 4, cache_dir=str(tmp_path / "b"), **kw)]
    assert got == want


def test_a_rewrite_without_a_side_file_removes_the_old_one(tmp_path: Path, monkeypatch) -> None:
    import wdstool.format.shard_table as shard_table

    with monkeypatch.context() as m:
        m.setattr(shard_table, "SIDE_MIN_SHARDS", 1)
        shards = _packed(tmp_path)
    assert (shards / SIDE_NAME).exists()
    pack(str(tmp_path / "src"), str(shards), PackOptions(workers=1, max_count=4, overwrite=True))
    assert not (shards / SIDE_NAME).exists()  # it would name the manifest it replaced


def test_the_hosts_first_rank_streams_a_manifest_without_a_side_file(
    small_tables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No side file, no table kept: the manifest goes into arrays without ``json.loads`` (no
    object per shard), and the loader delivers what the parsed manifest gives."""
    shards, kw = _packed(tmp_path), {"image_size": 16, "seed": 3, "label": None}
    want = _epoch(make_loader(shards, 4, cache_dir=str(tmp_path / "parsed"), **kw))
    monkeypatch.setattr(source_table, "LOCK_BYTES", 0)
    cache = tmp_path / "streamed"
    with monkeypatch.context() as m:
        _no_parse(m)
        loader = make_loader(shards, 4, cache_dir=str(cache), **kw)
        got = _epoch(loader)
    assert [k for k, _ in got] == [k for k, _ in want]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, want, strict=True))
    assert len(_tables(cache)) == 1  # kept for the host's other ranks


def test_a_remote_manifest_left_to_the_ordinary_parse_leaves_no_reading_thread(
    tmp_path: Path,
) -> None:
    """A large manifest on a web server whose second entry breaks the template: the stream
    stops at its first piece, and the thread reading pieces ahead ends with it (it was left
    blocked on a full queue, holding the connection, once per make_loader)."""
    import threading

    from tests.support.webserver import WebServer

    shards = [ShardEntry(f"s-{i:06d}.tar", 10, 1000, "ab" * 32) for i in range(100_000)]
    obj = Manifest(shards=tuple(shards), fingerprint="f" * 64).to_json()
    obj["shardlist"][1]["extra"] = 1  # another key: not the first entry's template
    (tmp_path / "index.json").write_text(json.dumps(obj, indent=1))
    assert (tmp_path / "index.json").stat().st_size > 6 * source_table.CHUNK

    def readers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "manifest-read-ahead"]

    with WebServer(tmp_path) as srv:
        url = f"{srv.url}/index.json"
        found = indexes.index_version(url, None)
        assert source_table.streamed_table(found, None, str(tmp_path / "c")) is None
        assert not readers()
