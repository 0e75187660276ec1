"""Parquet files read in place by the loader: Hub-layout files written by ``datasets`` itself,
on disk, over a loopback web server (hf:// and https), on moto's S3; row groups as the plan's
units, only the asked-for column chunks fetched."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from loaders import Source, make_loader
from tests.support.parquet import damage_group, hub_split
from tests.support.tars import build_tar
from tests.support.webserver import WebServer
from wdstool.base.errors import ConfigError, ShardError


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> tuple[Path, list[dict]]:
    """A Hub-layout repository: train (4 files of 100 rows, row groups of 50) and test (1
    file); the train rows in file order."""
    root = tmp_path_factory.mktemp("hub")
    rows = hub_split(root, "train", files=4, rows=100, group=50)
    hub_split(root, "test", files=1, rows=40, group=50, seed=7)
    return root, rows


def _loader(source, batch=8, **kw):
    args = {"image_size": 24, "num_workers": 0, "seed": 3, **kw}
    return make_loader(source, batch, **args)


def _epoch(loader, epoch=0):
    loader.set_epoch(epoch)
    return [b for b in loader]


def _by_key(batches) -> dict[str, torch.Tensor]:
    out = {}
    for b in batches:
        for k, v, px in zip(
            b["keys"], b.get("valid", [True] * len(b["keys"])), b["pixel_values"], strict=True
        ):
            if v:
                out[k] = px.clone()
    return out


def test_counts_keys_labels_and_fields_come_from_the_files(hub) -> None:
    root, rows = hub
    loader = _loader(f"{root}/data#train", fields={"caption": "text"}, shuffle=False, train=False)
    assert len(loader) == 400 // 8
    batches = _epoch(loader)
    keys = [k for b in batches for k in b["keys"]]
    assert keys == [r["key"] for r in rows]  # file order, then row order
    assert [int(x) for b in batches for x in b["labels"]] == [r["label"] for r in rows]
    assert [c for b in batches for c in b["caption"]] == [r["text"] for r in rows]


def test_several_splits_need_one_named_and_columns_are_checked_at_the_call(hub) -> None:
    root, _ = hub
    with pytest.raises(ShardError, match=r"splits test, train: name one"):
        _loader(f"{root}/data")
    assert len(_loader(f"{root}/data/test-*.parquet", batch=8)) == 40 // 8
    with pytest.raises(
        ConfigError, match=r"label='nope': no such integer column \(image \(Image\)"
    ):
        _loader(f"{root}/data#train", label="nope")
    with pytest.raises(ConfigError, match=r"label='text' is a string column"):
        _loader(f"{root}/data#train", label="text")
    with pytest.raises(ConfigError, match=r"fields\['x'\]='missing': no such column"):
        _loader(f"{root}/data#train", fields={"x": "missing"})
    with pytest.raises(ConfigError, match=r"image='label' is a int column"):
        _loader([Source(f"{root}/data#train", image="label")])


def test_ranks_and_workers_read_every_row_once_in_equal_batches(hub) -> None:
    root, rows = hub
    seen: Counter[str] = Counter()
    lengths = set()
    for rank in range(2):
        loader = _loader(f"{root}/data#train", batch=16, num_workers=2, rank=rank, world_size=2)
        batches = _epoch(loader, 1)
        lengths.add((len(loader), len(batches), tuple(len(b["keys"]) for b in batches)))
        seen.update(k for b in batches for k in b["keys"])
    assert len(lengths) == 1  # the same number of equal batches on both ranks
    assert seen == Counter(r["key"] for r in rows)  # every row once, on one rank


def test_pixels_equal_the_same_rows_packed_to_tars(hub, tmp_path: Path) -> None:
    """The same images under the same keys in tar shards: per key, the same pixels for the
    same seed, in training (random crops and flips) and evaluation."""
    root, rows = hub
    shards = []
    for s in range(0, len(rows), 64):
        path = tmp_path / f"shard-{s // 64:03d}.tar"
        path.write_bytes(
            build_tar(
                [
                    (r["key"], {"jpg": r["image"], "cls": b"%d" % r["label"]})
                    for r in rows[s : s + 64]
                ]
            )
        )
        shards.append(path)
    pattern = f"{tmp_path}/shard-{{000..{len(shards) - 1:03d}}}.tar"
    for train in (True, False):
        got = _by_key(_epoch(_loader(f"{root}/data#train", train=train, num_workers=2), 2))
        ref = _by_key(_epoch(_loader(pattern, train=train, num_workers=2), 2))
        assert got.keys() == ref.keys() == {r["key"] for r in rows}
        assert all(torch.equal(got[k], ref[k]) for k in ref), train


def test_same_topology_and_elastic_resume(hub) -> None:
    root, rows = hub
    src = f"{root}/data#train"
    full = [b["keys"] for b in _epoch(_loader(src, num_workers=2, shuffle_buffer=30), 1)]
    loader = _loader(src, num_workers=2, shuffle_buffer=30)
    loader.set_epoch(1)
    it = iter(loader)
    for _ in range(11):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    del it
    fresh = _loader(src, num_workers=2, shuffle_buffer=30)
    fresh.load_state_dict(state)
    assert [b["keys"] for b in fresh] == full[11:]
    # elastic: the rest of the epoch on 3 ranks, each owed row once (padding aside)
    after: Counter[str] = Counter()
    lengths = set()
    for r in range(3):
        new = _loader(src, batch=6, num_workers=1, rank=r, world_size=3, shuffle_buffer=30)
        new.load_state_dict(state)
        batches = [b["keys"] for b in new]
        lengths.add(len(batches))
        after.update(k for b in batches for k in b)
    owed = Counter(r["key"] for r in rows) - Counter(k for b in full[:11] for k in b)
    assert len(lengths) == 1 and not (owed - after)
    assert sum((after - owed).values()) <= 3


def test_a_mixture_of_parquet_and_tars(hub, tmp_path: Path) -> None:
    root, rows = hub
    (tmp_path / "t-0.tar").write_bytes(
        build_tar([(f"tar{i:03d}", {"jpg": rows[i]["image"], "cls": b"1"}) for i in range(40)])
    )
    loader = _loader(
        [Source(f"{root}/data#train", weight=3), Source(str(tmp_path / "t-0.tar"), weight=1)],
        batch=10,
        epoch_size=160,
    )
    batches = _epoch(loader)
    sources = Counter(int(s) for b in batches for s in b["source"])
    assert sources == {0: 120, 1: 40}
    keys = [k for b in batches for k in b["keys"]]
    assert len(set(keys)) == len(keys)


def test_a_damaged_row_group_replaces_only_its_rows(hub, tmp_path: Path) -> None:
    root, rows = hub
    import shutil

    data = tmp_path / "data"
    shutil.copytree(root / "data", data)
    damage_group(data / "train-00002-of-00004.parquet", 1)
    with pytest.raises(Exception, match=r"train-00002-of-00004.parquet: row group 1"):
        _epoch(_loader(f"{data}#train", shuffle=False))
    loader = _loader(f"{data}#train", on_error="skip", max_replaced=0.2)
    keys = [k for b in _epoch(loader) for k in b["keys"]]
    assert len(keys) == 400
    lost = {r["key"] for r in rows[250:300]}  # file 2, rows 50-99
    assert not lost & set(keys)
    assert {r["key"] for r in rows} - lost <= set(keys)


def _footer_len(path: Path) -> int:
    with open(path, "rb") as f:
        f.seek(-8, os.SEEK_END)
        return int.from_bytes(f.read(4), "little") + 8


def test_hub_over_http_fetches_footers_then_only_the_columns_asked_for(tmp_path, monkeypatch):
    """Before the first batch: the footers, then the row groups the workers start on (each
    worker's first and the two it fetches ahead; unshuffled: a shuffled stream reads its first
    block of 100 rows first); over the epoch of both ranks: the image and label chunks once
    (the text column never), each footer once."""
    rows = hub_split(tmp_path, "train", files=4, rows=100, group=10, text_bytes=1500)
    files = sorted((tmp_path / "data").glob("train-*.parquet"))
    asked, groups, text = 0, [], 0
    for f in files:
        md = pq.ParquetFile(f).metadata
        for g in range(md.num_row_groups):
            cols = [md.row_group(g).column(j) for j in range(md.row_group(g).num_columns)]
            n = sum(c.total_compressed_size for c in cols if c.path_in_schema != "text")
            text += sum(c.total_compressed_size for c in cols if c.path_in_schema == "text")
            asked += n
            groups.append(n)
    assert len(groups) == 40 and text > 0.2 * asked  # a text column worth not reading
    with WebServer(tmp_path) as srv:
        monkeypatch.setenv("HF_ENDPOINT", srv.url)
        src = "hf://datasets/someone/pets#train"
        args = {"batch": 4, "num_workers": 2, "world_size": 2, "prefetch_factor": 1}
        loader = _loader(src, rank=0, shuffle=False, **args)
        footers = srv.total_sent(".parquet")
        assert footers <= sum(max(8 << 10, f.stat().st_size // 32, _footer_len(f)) for f in files)
        it = iter(loader)
        keys = list(next(it)["keys"])
        first = srv.total_sent(".parquet") - footers
        assert max(groups) <= first <= 2 * 3 * max(groups) * 1.01
        keys += [k for b in it for k in b["keys"]]
        keys += [k for b in _epoch(_loader(src, rank=1, shuffle=False, **args)) for k in b["keys"]]
        epoch = srv.total_sent(".parquet") - footers  # rank 1 found the footers kept
        assert asked <= epoch <= 1.05 * asked, (epoch, asked)
        assert sorted(keys) == sorted(r["key"] for r in rows)
        # shuffled, batches of 12 on 2 ranks x 2 workers: row groups split between workers
        # (one download per host) and between ranks
        before = srv.total_sent(".parquet")
        args = {**args, "batch": 12}
        for rank in range(2):
            _epoch(_loader(src, rank=rank, **args), 3)
        assert srv.total_sent(".parquet") - before <= 1.05 * asked


def test_https_brace_pattern_and_s3(hub, s3_server, s3_bucket) -> None:
    root, rows = hub
    with WebServer(root) as srv:
        url = f"{srv.url}/data/train-{{00000..00003}}-of-00004.parquet"
        keys = [k for b in _epoch(_loader(url, shuffle=False)) for k in b["keys"]]
        assert keys == [r["key"] for r in rows]
    client = s3_server.client()
    for f in sorted((root / "data").glob("train-*.parquet")):
        client.put_object(Bucket=s3_bucket, Key=f"pets/data/{f.name}", Body=f.read_bytes())
    loader = _loader(
        f"s3://{s3_bucket}/pets/data/", storage_options=s3_server.storage_options, shuffle=False
    )
    assert [k for b in _epoch(loader) for k in b["keys"]] == [r["key"] for r in rows]


def test_the_listing_and_footers_are_read_once_per_host(hub, tmp_path: Path) -> None:
    root, _ = hub
    with WebServer(root) as srv, pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_ENDPOINT", srv.url)
        mp.setenv("WDSTOOL_CACHE", str(tmp_path / "cache"))
        _loader("hf://datasets/someone/pets#train")
        first = srv.total_sent(".parquet")
        assert first > 0
        asked = len(srv.requests)
        _loader("hf://datasets/someone/pets#train")  # another rank of the host
        assert len(srv.requests) == asked  # the listing and the footers it kept
        assert len(os.listdir(tmp_path / "cache" / "parquet-footers")) == 4
        mp.setattr("loaders.parquet_source.LISTING_TTL", 0.0)  # a later run lists again...
        _loader("hf://datasets/someone/pets#train")
        assert [p for _m, p, _r in srv.requests[asked:]] == [
            "/api/datasets/someone/pets/tree/main?recursive=true"
        ]
        assert srv.total_sent(".parquet") == first  # ...and finds the footers kept by version


def test_cache_dir_keeps_the_chunks_and_dropped_connections_are_resumed(hub, tmp_path) -> None:
    """With ``cache_dir`` a second epoch fetches nothing; a server that cuts bodies and answers
    503 costs retries, not rows: the same keys and pixels as on disk."""
    root, _rows = hub
    ref = _by_key(_epoch(_loader(f"{root}/data#train", num_workers=2), 1))
    faults = ["drop:3000", "503", "drop:70000", "reset"] * 3
    with WebServer(root, faults=faults) as srv:
        url = f"{srv.url}/data/train-{{00000..00003}}-of-00004.parquet"
        loader = _loader(url, num_workers=2, cache_dir=tmp_path / "cache")
        got = _by_key(_epoch(loader, 1))
        assert srv.injected["drop"] and srv.injected["503"]
        assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref)
        sent = srv.total_sent(".parquet")
        again = _by_key(_epoch(loader, 1))
        assert srv.total_sent(".parquet") == sent  # every chunk from the host's cache
        assert all(torch.equal(again[k], ref[k]) for k in ref)


def test_a_binary_image_column_named_and_the_hubs_conversion_layout(tmp_path, monkeypatch):
    """Plain binary columns (no ``Image`` feature): two of them need ``image=``; the Hub's
    Parquet conversion (``refs/convert/parquet``: ``default/train/0000.parquet``) by split."""
    import pyarrow as pa

    from tests.conftest import jpeg_bytes

    for split, n in (("train", 30), ("test", 10)):
        table = pa.table(
            {
                "jpg": [jpeg_bytes(i) for i in range(n)],
                "thumb": [jpeg_bytes(i, (16, 16)) for i in range(n)],
                "cls": pa.array([i % 4 for i in range(n)], pa.int32()),
            }
        )
        (tmp_path / "default" / split).mkdir(parents=True)
        pq.write_table(table, tmp_path / "default" / split / "0000.parquet", row_group_size=8)
    with pytest.raises(ConfigError, match=r"several image columns \(jpg, thumb\)"):
        _loader(f"{tmp_path}/default#train")
    loader = _loader([Source(f"{tmp_path}/default#train", image="thumb")], shuffle=False)
    batches = _epoch(loader)
    assert [int(x) for b in batches for x in b["labels"]] == [i % 4 for i in range(30)]
    # a key is the file's path below the listed files' common folder, then the row
    assert batches[0]["keys"][:2] == ["0000-000000", "0000-000001"]
    with WebServer(tmp_path) as srv:
        monkeypatch.setenv("HF_ENDPOINT", srv.url)
        hub_loader = _loader(
            [Source("hf://datasets/o/n@refs%2Fconvert%2Fparquet/default#test", image="jpg")]
        )
        assert len(hub_loader) == 10 // 8 + 1
        assert sorted(k for b in _epoch(hub_loader) for k in b["keys"]) == [
            f"0000-{i:06d}" for i in range(10)
        ]
        assert any("refs%2Fconvert%2Fparquet" in p for _m, p, _r in srv.requests)


def test_fields_reach_into_struct_columns_and_names_need_not_be_extensions(tmp_path) -> None:
    import pyarrow as pa

    from loaders import Interleaved
    from tests.conftest import jpeg_bytes

    n = 12
    table = pa.table(
        {
            "image": [jpeg_bytes(i) for i in range(n)],
            "fine label": pa.array(list(range(n)), pa.int64()),
            "meta": [{"source": {"site": f"s{i}"}, "score": i / 2} for i in range(n)],
            "tags": [[f"t{i}", "x"] for i in range(n)],
        }
    )
    pq.write_table(table, tmp_path / "one.parquet", row_group_size=5)
    loader = _loader(
        str(tmp_path / "one.parquet"),
        batch=4,
        label="fine label",
        fields={"site": "meta:source.site", "meta": "meta", "tags": "tags"},
        shuffle=False,
    )
    b = _epoch(loader)[1]
    assert b["labels"].tolist() == [4, 5, 6, 7]
    assert b["site"] == ["s4", "s5", "s6", "s7"]
    assert b["meta"][0] == {"source": {"site": "s4"}, "score": 2.0}
    assert b["tags"][0] == ["t4", "x"]
    with pytest.raises(ConfigError, match=r"one.parquet: a Parquet source holds one image a row"):
        _loader(str(tmp_path / "one.parquet"), output=Interleaved(), label=None)
    with pytest.raises(ConfigError, match=r"'pixel_values' is a key the loader fills itself"):
        _loader(str(tmp_path / "one.parquet"), fields={"pixel_values": "tags"})


def test_a_hub_repository_is_parquet_by_its_files_or_a_webdataset_by_its_index(
    hub, tmp_path, monkeypatch
) -> None:
    """``hf://datasets/ORG/NAME`` names a Parquet data set where its files are Parquet, and a
    WebDataset repository (tars and an index.json) as before."""
    import shutil

    root, rows = hub
    shutil.copytree(root / "data", tmp_path / "pq" / "data")
    wds = tmp_path / "wds"
    wds.mkdir()
    (wds / "s-0.tar").write_bytes(
        build_tar([(r["key"], {"jpg": r["image"], "cls": b"1"}) for r in rows[:20]])
    )
    index = {
        "__kind__": "wids-shard-index-v1",
        "wids_version": 1,
        "shardlist": [{"url": "s-0.tar", "nsamples": 20}],
    }
    (wds / "index.json").write_text(json.dumps(index))
    with WebServer(tmp_path) as srv:
        monkeypatch.setenv("HF_ENDPOINT", srv.url)
        assert len(_loader("hf://datasets/someone/pets/pq#train", batch=10)) == 40
        tars = _loader("hf://datasets/someone/shards/wds", batch=10, label=None)
        assert sorted(k for b in _epoch(tars) for k in b["keys"]) == sorted(
            r["key"] for r in rows[:20]
        )
