"""Someone else's shards in img2dataset's layout on S3 (moto on loopback) and on a web server
(tests/support/webserver.py): ``wdstool index --out`` counts them from their side files by
ranged reads -- a few requests a shard, the tars of unchecked shards never asked for -- to the
counts and keys a header scan gives; a lying side file is named; the index (written to S3 too)
gives make_loader exact epochs over 2 ranks. Requests and bytes are counted by a proxy in front
of the store and by the web server, not by the code under test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loaders import make_loader
from shard_writer.foreign_count import CountBy
from shard_writer.index_folder import IndexOptions, write_index_folder
from tests.support.countproxy import CountingProxy
from tests.support.img2dataset import write_shards
from tests.support.webserver import WebServer
from wdstool.base.errors import ShardError
from wdstool.format.manifest import parse_manifest

SHARDS, PER_SHARD = 4, 250


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    folder = tmp_path_factory.mktemp("i2d-s3") / "shards"
    return folder, write_shards(folder, shards=SHARDS, per_shard=PER_SHARD, seed=2)


@pytest.fixture
def on_s3(local, s3_server, s3_bucket: str) -> str:
    client = s3_server.client()
    for p in sorted(local[0].iterdir()):
        client.put_object(Bucket=s3_bucket, Key=f"laion/{p.name}", Body=p.read_bytes())
    return f"s3://{s3_bucket}/laion"


def _counts(index: bytes, where: str) -> list[tuple[str, int, int]]:
    return [
        (s.url.rsplit("/", 1)[-1], s.nsamples, s.filesize)
        for s in parse_manifest(index, where).shards
    ]


def test_side_files_on_s3_count_as_a_scan_with_a_few_requests_a_shard(
    local, on_s3: str, s3_server, s3_bucket: str, tmp_path: Path
) -> None:
    folder, keys = local
    with CountingProxy(s3_server.endpoint_url) as proxy:
        opts = {**s3_server.storage_options, "endpoint_url": proxy.endpoint_url}
        out = f"s3://{s3_bucket}/laion-index"
        got = write_index_folder([on_s3], out, IndexOptions(check=1), storage_options=opts)
        tar_gets, parquet_gets = proxy.gets(".tar"), proxy.gets(".parquet")
        stats_gets = proxy.gets("_stats.json")
        read = proxy.bytes_sent(".parquet") + proxy.bytes_sent("_stats.json")
    assert got["counted_by"] == {"side_files": SHARDS, "headers": 0} and got["checked"] == 1
    assert len(tar_gets) == 1  # only the checked shard's tar was read
    assert sum(parquet_gets.values()) <= 2 * SHARDS  # footer + key/status chunks, each once
    assert sum(stats_gets.values()) == SHARDS
    assert got["bytes_read"] - proxy.bytes_sent(".tar") == read  # what the summary says
    client = s3_server.client()
    index = client.get_object(Bucket=s3_bucket, Key="laion-index/index.json")["Body"].read()
    scanned = write_index_folder(
        [str(folder)], str(tmp_path / "scan"), IndexOptions(count_by=CountBy.SCAN)
    )
    assert scanned["num_samples"] == got["num_samples"] == sum(map(len, keys.values()))
    assert _counts(index, out) == _counts((tmp_path / "scan" / "index.json").read_bytes(), "x")
    # the index on S3 gives two ranks every sample exactly once, whole shards each
    kw = {"label": None, "image_size": 16, "uneven": "mask", "split": "shards"}
    seen = []
    for r in range(2):
        loader = make_loader(
            out,
            32,
            rank=r,
            world_size=2,
            num_workers=0,
            storage_options=s3_server.storage_options,
            **kw,
        )
        seen += [k for b in loader for k, v in zip(b["keys"], b["valid"], strict=True) if v]
    assert sorted(seen) == sorted(k for ks in keys.values() for k in ks)


def test_a_lying_side_file_on_s3_is_named(local, on_s3: str, s3_server, s3_bucket: str) -> None:
    client = s3_server.client()
    stats = json.loads((local[0] / "00002_stats.json").read_text())
    stats["successes"] -= 1
    client.put_object(Bucket=s3_bucket, Key="laion/00002_stats.json", Body=json.dumps(stats))
    with pytest.raises(ShardError, match=r"laion/00002\.tar: its side files disagree"):
        write_index_folder(
            [on_s3],
            f"s3://{s3_bucket}/idx",
            IndexOptions(check=0),
            storage_options=s3_server.storage_options,
        )


def test_side_files_over_http_a_brace_pattern(local, tmp_path: Path) -> None:
    """A web server lists nothing: each shard's Parquet is sized by a HEAD, read by ranges."""
    folder, keys = local
    with WebServer(folder) as srv:
        pattern = f"{srv.url}/{{00000..{SHARDS - 1:05d}}}.tar"
        got = write_index_folder([pattern], str(tmp_path / "out"), IndexOptions(check=0))
        tars = [r for r in srv.requests if r[1].endswith(".tar")]
        heads = [r for r in srv.requests if r[0] == "HEAD"]
    assert got["counted_by"]["side_files"] == SHARDS and not tars
    assert len(heads) == SHARDS and got["requests"] <= 4 * SHARDS
    m = parse_manifest((tmp_path / "out" / "index.json").read_bytes(), "x")
    assert [s.nsamples for s in m.shards] == [len(k) for k in keys.values()]
    assert all(s.url.startswith(srv.url) for s in m.shards)
