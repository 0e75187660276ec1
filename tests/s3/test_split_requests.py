"""A shard split between workers, read from S3 (moto on loopback, through a proxy that logs each
GET with its Range and the bytes it sent back): few requests of megabytes each, never one a
sample, and each byte once an epoch.

The plan gives each worker one contiguous run of a rank's share, so a data set of one shard
(what ``pack``'s defaults make of 2,000 images) is read by both workers from inside the shard.
Before issue 53, the worker starting inside it asked for 8 KB at every tar header and the other
asked for its end in 512 KB pieces: ~1 request a sample (a 1,200-image shard on moto: 1,157
requests, 72 s to the first batch).
"""

from __future__ import annotations

import io
import json
import re

import pytest

from loaders import make_loader
from shard_writer.pack import PackOptions, pack
from tests.conftest import noise_image
from tests.support.countproxy import CountingProxy
from wdstool.base.remote import WALK_PAGE

pytestmark = pytest.mark.slow
N = 48  # ~110 KB JPEGs: one shard of ~5.3 MB
MB = 1 << 20


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory, s3_server) -> tuple[str, int]:
    """N images packed with pack's defaults (one shard) to S3; the shard's URL and size."""
    import uuid

    src = tmp_path_factory.mktemp("split-requests") / "src"
    for i in range(N):
        d = src / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        noise_image(512, 384, seed=i).save(buf, "JPEG", quality=90)
        (d / f"{i:03d}.jpg").write_bytes(buf.getvalue())
    bucket = f"split-{uuid.uuid4().hex[:10]}"
    s3_server.make_bucket(bucket)
    url = f"s3://{bucket}/ds"
    summary = pack(str(src), url, PackOptions(workers=1), storage_options=s3_server.storage_options)
    assert summary.shards == 1
    return url, summary.total_bytes


def _epochs(url: str, options: dict, epochs=(0, 1), workers: int = 2) -> list[list[str]]:
    loader = make_loader(
        url, 8, image_size=16, num_workers=workers, seed=3, storage_options=options
    )
    out = []
    for e in epochs:
        loader.set_epoch(e)
        out.append([k for b in loader for k in b["keys"]])
    return out


def _asked(rng: str, size: int) -> int:
    """Bytes a GET's Range asked for (the whole object: no Range)."""
    m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng)
    if m is None:
        return size
    a, b = int(m.group(1)), m.group(2)
    return (int(b) + 1 if b else size) - a


def test_pack_records_offsets_and_a_split_shard_is_one_ranged_get_per_slice(
    one_shard, s3_server
) -> None:
    url, size = one_shard
    with CountingProxy(s3_server.endpoint_url) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.endpoint_url}
        for keys in _epochs(url, options):
            assert sorted(keys) == sorted(set(keys)) and len(keys) == N
        tar = proxy.get_log(".tar")
        offsets = proxy.get_log("index.offsets.npy")
    # 2 workers x 2 epochs: a worker's share of one shard is at most two slices (the epoch's
    # rotation cuts the shard once), each one GET of exactly its bytes
    assert len(tar) <= 2 * 2 * 2, tar
    assert sum(n for _p, _r, n in tar) <= 2 * 1.05 * size
    assert all(n == _asked(r, size) for _p, r, n in tar), tar  # nothing asked is left unread
    # the offsets a worker needs come in one small read per worker, kept for later epochs
    assert 1 <= len(offsets) <= 2 and all(n == N * 4 for _p, _r, n in offsets), offsets


def test_a_split_shard_without_offsets_is_fetched_once_per_host(
    one_shard, s3_server, tmp_path
) -> None:
    """A manifest that counts samples but gives no offsets (written before they were recorded,
    or by another tool): the shard is downloaded once, in one GET, through the host's cache,
    and both workers walk its headers there; the next epoch fetches nothing."""
    import fsspec

    url, size = one_shard
    fs = fsspec.filesystem("s3", **s3_server.storage_options)
    manifest = json.loads(fs.cat(f"{url}/index.json"))
    manifest.pop("sample_offsets")
    bare = url + "-bare"
    for name in fs.ls(url, detail=False):
        if name.endswith(".tar"):
            fs.copy(name, bare + "/" + name.rsplit("/", 1)[1])
    fs.pipe(f"{bare}/index.json", json.dumps(manifest).encode())
    with CountingProxy(s3_server.endpoint_url) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.endpoint_url}
        first, second = _epochs(bare, options)
        tar = proxy.get_log(".tar")
    assert sorted(first) == sorted(set(first)) and len(first) == N == len(second)
    assert [(r, n) for _p, r, n in tar] == [("", size)], tar


def test_without_a_host_cache_the_walk_asks_for_megabytes(
    one_shard, s3_server, tmp_path, monkeypatch
) -> None:
    """No offsets and no cache folder that can be written: the worker starting inside the shard
    walks its headers in pieces of WALK_PAGE (never a request a sample) and the one ending
    inside it asks for pieces sized to its samples left."""
    import fsspec

    url, size = one_shard
    fs = fsspec.filesystem("s3", **s3_server.storage_options)
    bare = url + "-walk"
    manifest = json.loads(fs.cat(f"{url}/index.json"))
    manifest.pop("sample_offsets")
    for name in fs.ls(url, detail=False):
        if name.endswith(".tar"):
            fs.copy(name, bare + "/" + name.rsplit("/", 1)[1])
    fs.pipe(f"{bare}/index.json", json.dumps(manifest).encode())
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("WDSTOOL_CACHE", str(tmp_path / "a-file" / "cache"))  # cannot be made
    with CountingProxy(s3_server.endpoint_url) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.endpoint_url}
        (keys,) = _epochs(bare, options, epochs=(0,))
        tar = proxy.get_log(".tar")
    assert sorted(keys) == sorted(set(keys)) and len(keys) == N
    assert len(tar) <= 8, tar  # 5.3 MB: ~2 walk pieces and ~3 slices, not ~50 requests
    small = [r for _p, r, n in tar if _asked(r, size) < min(WALK_PAGE, size) and n < MB]
    assert len(small) <= 3, tar  # a piece under WALK_PAGE only at a slice's or the shard's end


def test_make_loader_warns_when_remote_shards_are_fewer_than_readers(
    one_shard, s3_server, caplog
) -> None:
    """One shard for 1 rank x 2 workers on S3: rank 0 says readers share it and how to get more
    shards; enough shards for the readers (no workers: one reader) say nothing."""
    url, _size = one_shard
    options = s3_server.storage_options
    with caplog.at_level("WARNING", logger="loaders.loader"):
        make_loader(url, 8, image_size=16, num_workers=2, storage_options=options)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "loaders.loader"]
    assert line.startswith(f"{url}: 1 shard for 2 readers (ranks x workers): readers share")
    assert "one ranged request" in line and "--max-count" in line
    caplog.clear()
    with caplog.at_level("WARNING", logger="loaders.loader"):
        make_loader(url, 8, image_size=16, num_workers=0, storage_options=options)
    assert not [r for r in caplog.records if r.name == "loaders.loader"]
