"""Streaming from a real S3 endpoint (moto on loopback), through faults, and through the cache."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest
import torch

from loaders import make_loader
from shard_writer.pack import PackOptions, pack
from tests.conftest import make_tree
from tests.support.faultproxy import FaultProxy
from wdstool.base.errors import StorageError
from wdstool.base.retry import RetryPolicy

FAST_RETRY = RetryPolicy(attempts=6, base_delay=0.01, max_delay=0.05, patience=0.0)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    # 64x48 noisy JPEGs of ~4 KB: shards of 15 samples are ~70 KB, so faults at byte offsets
    # of a few KB to tens of KB land inside shard bodies
    counts = {"ant": 14, "bee": 12, "cat": 11, "dog": 9}
    return make_tree(tmp_path_factory.mktemp("stream-s3") / "src", counts, seed=21)


@pytest.fixture(scope="module")
def datasets(tree: Path, s3_server, tmp_path_factory) -> tuple[Path, str]:
    """The same pack, to a local folder and to S3."""
    import uuid

    local = tmp_path_factory.mktemp("stream-s3-local") / "shards"
    options = PackOptions(workers=1, max_count=15)
    pack(str(tree), str(local), options)
    bucket = f"m-{uuid.uuid4().hex[:12]}"
    s3_server.make_bucket(bucket)
    url = f"s3://{bucket}/train"
    pack(str(tree), url, options, storage_options=s3_server.storage_options)
    return local, url


def _epoch(loader, epoch: int = 0) -> tuple[list[str], torch.Tensor]:
    loader.set_epoch(epoch)
    keys: list[str] = []
    pixels = []
    for batch in loader:
        keys.extend(batch["keys"])
        pixels.append(batch["pixel_values"].clone())
    return keys, torch.cat(pixels)


def _loader(source, storage_options=None, **kw):
    args = dict(image_size=32, num_workers=2, seed=7, shuffle_buffer=20)
    args.update(kw)
    return make_loader(source, 8, storage_options=storage_options, **args)


def test_s3_delivers_exactly_what_local_delivers(datasets, s3_server) -> None:
    local, url = datasets
    want_keys, want_px = _epoch(_loader(str(local)), 1)
    keys, px = _epoch(_loader(url, s3_server.storage_options), 1)
    assert keys == want_keys and len(keys) == 46
    assert torch.equal(px, want_px)


def test_faults_lose_and_repeat_nothing(datasets, s3_server) -> None:
    """Dropped connections mid-body, stalls past the read timeout, 500, 503 SlowDown and
    resets: the same keys in the same order, the same pixels, as the run without faults."""
    local, url = datasets
    want_keys, want_px = _epoch(_loader(str(local)), 0)
    faults = ["drop:9000", "ok", "503", "drop:40000", "500", "ok", "reset", "stall:20000", "ok"]
    with FaultProxy(s3_server.port, stall_s=2.0) as proxy:
        options = {
            **s3_server.storage_options,
            "endpoint_url": proxy.endpoint_url,
            "config_kwargs": {"read_timeout": 0.5, "connect_timeout": 2},
        }
        loader = _loader(url, options, retry=FAST_RETRY)
        kinds = ("drop", "stall", "500", "503", "reset")
        # which request meets which fault depends on how the workers' requests interleave (a
        # stall or drop landing past the end of a short response does not count): run the
        # epoch again, each time checked in full, until every kind has hit at least once
        for _ in range(4):
            proxy.set_schedule(faults, cycle=True)  # the manifest was read before the faults
            keys, px = _epoch(loader, 0)
            assert keys == want_keys
            assert torch.equal(px, want_px)
            if all(proxy.injected[k] >= 1 for k in kinds):
                break
        injected = dict(proxy.injected)
    for kind in kinds:
        assert injected.get(kind, 0) >= 1, injected


def test_retries_run_out_with_url_offset_and_cause(datasets, s3_server) -> None:
    _, url = datasets
    with FaultProxy(s3_server.port) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.endpoint_url}
        loader = _loader(url, options, retry=FAST_RETRY, num_workers=0, shuffle=False)
        # the first shard's GET breaks after 30,000 bytes, then the store only throttles
        proxy.set_schedule(["drop:30000"] + ["503"] * 50)
        with pytest.raises(StorageError) as info:
            _epoch(loader)
    message = info.value.message
    assert f"{url}/train-000000.tar" in message or f"{url}/train-00000" in message
    assert "giving up at byte offset" in message and "after 6 attempts" in message
    offset = int(message.split("byte offset ")[1].split()[0])
    assert 20_000 < offset < 30_000  # resumed where the drop happened (minus the headers)
    assert "SlowDown" in message


def test_cache_fills_once_then_serves_from_disk(datasets, s3_server, tmp_path: Path) -> None:
    local, url = datasets
    cache = tmp_path / "cache"
    want_keys, _ = _epoch(_loader(str(local)), 2)
    loader = _loader(url, s3_server.storage_options, cache_dir=cache)
    assert _epoch(loader, 2)[0] == want_keys
    manifest = json.loads((local / "index.json").read_text())
    bucket, prefix = url[len("s3://") :].split("/", 1)
    entries = sorted(p for p in cache.rglob("*") if p.is_file() and ".work" not in p.parts)
    expected = sorted(
        cache / "s3" / bucket / prefix / f"{e['url']}.{e['sha256'][:16]}"
        for e in manifest["shardlist"]
    )
    assert entries == expected  # every shard, named by bucket + full key + content hash
    for e in manifest["shardlist"]:
        cached = cache / "s3" / bucket / prefix / f"{e['url']}.{e['sha256'][:16]}"
        assert cached.read_bytes() == (local / e["url"]).read_bytes()
    # break every shard in the store: a loader still reading S3 would fail on tar headers
    fs = fsspec.filesystem("s3", **s3_server.storage_options, skip_instance_cache=True)
    originals = {}
    for e in manifest["shardlist"]:
        key = f"{bucket}/{prefix}/{e['url']}"
        originals[key] = fs.cat_file(key)
        fs.pipe_file(key, b"\0" * e["filesize"])
    try:
        assert _epoch(loader, 2)[0] == want_keys
    finally:
        for key, data in originals.items():
            fs.pipe_file(key, data)
