"""The local shard cache: names, atomic fills, LRU limit, several processes at once, kill -9."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import fsspec
import pytest

from loaders.cache import ShardCache
from loaders.source import ShardAccess

MB = 1_000_000


@pytest.fixture(scope="module")
def objects(s3_server) -> dict[str, bytes]:
    """Three 1 MB objects; two share a base name under different prefixes. Uploaded once for
    the module: every test only reads them (each has its own cache folder)."""
    import uuid

    s3_bucket = f"c-{uuid.uuid4().hex[:16]}"
    s3_server.make_bucket(s3_bucket)
    fs = fsspec.filesystem("s3", **s3_server.storage_options, skip_instance_cache=True)
    out = {}
    for i, key in enumerate(["a/train-000000.tar", "b/train-000000.tar", "a/train-000001.tar"]):
        data = hashlib.sha256(str(i).encode()).digest() * (MB // 32)
        fs.pipe_file(f"{s3_bucket}/{key}", data)
        out[f"s3://{s3_bucket}/{key}"] = data
    return out


def _fills_done(cache_dir: str | Path, timeout: float = 30) -> None:
    """Wait until no background download holds an entry lock (published or given up, and the
    eviction after it done): readers may finish before the download's last rename."""
    import fcntl

    deadline = time.monotonic() + timeout
    for lock in Path(cache_dir, ".work").glob("*.lock"):
        fd = os.open(lock, os.O_RDWR)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, f"{lock}: fill still running"
                    time.sleep(0.005)
        finally:
            os.close(fd)


def _read_all(access: ShardAccess, url: str, stop_after: int | None = None) -> bytes:
    with access.open(url) as f:
        data = f.read(stop_after) if stop_after is not None else f.read()
    assert access.cache_dir is not None
    _fills_done(access.cache_dir)
    return data


def test_same_base_name_in_two_prefixes_does_not_collide(objects, s3_server, tmp_path) -> None:
    access = ShardAccess(storage_options=s3_server.storage_options, cache_dir=str(tmp_path))
    for url, data in objects.items():
        assert _read_all(access, url) == data
    cache = ShardCache(tmp_path)
    for url, data in objects.items():
        path = cache.lookup(url)
        assert path is not None and Path(path).read_bytes() == data
    assert len(cache.entries()) == 3


def _wait_for_entry(cache: ShardCache, url: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while (path := cache.lookup(url)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path is not None, f"{url} was never published"
    return path


def test_reader_stopping_early_still_leaves_a_complete_entry(objects, s3_server, tmp_path) -> None:
    """The download runs at network speed in the background: a reader that stops after 1,000
    bytes leaves the whole shard, published only once complete."""
    url, data = next(iter(objects.items()))
    access = ShardAccess(storage_options=s3_server.storage_options, cache_dir=str(tmp_path))
    assert _read_all(access, url, stop_after=1000) == data[:1000]
    cache = ShardCache(tmp_path)
    assert Path(_wait_for_entry(cache, url)).read_bytes() == data
    assert not [p for p in (tmp_path / ".work").iterdir() if p.suffix == ".part"]


def test_readers_of_a_shard_being_filled_follow_the_one_download(
    objects, s3_server, tmp_path
) -> None:
    """Three readers open the same shard at once (as two ranks of a node do at a boundary
    shard): one GET in all; every reader gets every byte."""
    from tests.support.countproxy import CountingProxy

    url, data = next(iter(objects.items()))
    with CountingProxy(s3_server.endpoint_url) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.endpoint_url}
        access = ShardAccess(storage_options=options, cache_dir=str(tmp_path))
        files = [access.open(url, size=len(data)) for _ in range(3)]
        try:
            assert [f.read() for f in reversed(files)] == [data] * 3
        finally:
            for f in files:
                f.close()
        key = url.split("://", 1)[1]
        assert proxy.gets()[f"/{key}"] == 1, proxy.requests
    assert Path(_wait_for_entry(ShardCache(tmp_path), url)).read_bytes() == data


def test_limit_evicts_least_recently_used(objects, s3_server, tmp_path) -> None:
    urls = list(objects)
    access = ShardAccess(
        storage_options=s3_server.storage_options, cache_dir=str(tmp_path), cache_limit=2.5 * MB
    )
    cache = ShardCache(tmp_path)
    _read_all(access, urls[0])
    _read_all(access, urls[1])
    # the order of use is the entries' mtimes: set them apart explicitly (urls[0] the older),
    # instead of sleeping between reads and hoping the clock ticks
    now = time.time()
    for url, age in ((urls[0], 200), (urls[1], 100)):
        path = cache.lookup(url)
        assert path is not None
        os.utime(path, (now - age, now - age))
    assert _read_all(access, urls[0]) == objects[urls[0]]  # a hit: urls[0] is now the newest
    assert os.stat(cache.entry_path(urls[0])).st_mtime > now - 100  # the hit refreshed it
    _read_all(access, urls[2])  # over the limit: the least recently used (urls[1]) goes
    assert cache.lookup(urls[1]) is None
    assert cache.lookup(urls[0]) is not None and cache.lookup(urls[2]) is not None
    assert cache.total_bytes() <= 2.5 * MB


def test_wrong_size_entry_is_ignored_and_refilled(objects, s3_server, tmp_path) -> None:
    url, data = next(iter(objects.items()))
    cache = ShardCache(tmp_path)
    path = Path(cache.entry_path(url))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"short")  # e.g. left by a foreign tool
    access = ShardAccess(storage_options=s3_server.storage_options, cache_dir=str(tmp_path))
    with access.open(url, size=len(data)) as f:
        assert f.read() == data
    _fills_done(tmp_path)
    assert path.read_bytes() == data


def _reader(args: tuple[dict, str, str, int]) -> str:
    options, cache_dir, url, rounds = args
    access = ShardAccess(storage_options=options, cache_dir=cache_dir, cache_limit=3 * MB)
    digests = set()
    for _ in range(rounds):
        with access.open(url) as f:
            data = f.read()
        digests.add(hashlib.sha256(data).hexdigest())
    return ",".join(sorted(digests))


def test_many_processes_share_one_cache(objects, s3_server, tmp_path) -> None:
    """8 processes x 3 rounds over 3 objects with a limit below their total: every read is
    right, whatever mix of fills, hits and evictions happened."""
    urls = list(objects)
    jobs = [(s3_server.storage_options, str(tmp_path), urls[i % 3], 3) for i in range(8)]
    with mp.get_context("spawn").Pool(4) as pool:
        results = pool.map(_reader, jobs)
    for (_, _, url, _), got in zip(jobs, results, strict=True):
        assert got == hashlib.sha256(objects[url]).hexdigest()
    cache = ShardCache(tmp_path)
    for _mtime, size, path in cache.entries():
        assert size == MB // 32 * 32, path  # only complete entries exist
    assert cache.total_bytes() <= 3 * MB


def _fill_slowly(options: dict, cache_dir: str, url: str, ready) -> None:
    import loaders.cache
    import wdstool.base.remote

    # a slow network: 64 KB every 0.2 s
    loaders.cache.FILL_CHUNK = 64 * 1024
    read = wdstool.base.remote.RangeReader.readinto

    def slow_readinto(self, b):
        time.sleep(0.2)
        return read(self, b)

    wdstool.base.remote.RangeReader.readinto = slow_readinto
    access = ShardAccess(storage_options=options, cache_dir=cache_dir)
    with access.open(url) as f:
        f.read(300_000)
        ready.set()
        time.sleep(60)  # killed here, mid-fill


def test_kill_9_mid_fill_leaves_nothing_usable_and_next_reader_fills(
    objects, s3_server, tmp_path
) -> None:
    url, data = next(iter(objects.items()))
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(
        target=_fill_slowly, args=(s3_server.storage_options, str(tmp_path), url, ready)
    )
    proc.start()
    assert ready.wait(60)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    cache = ShardCache(tmp_path)
    assert cache.lookup(url) is None
    parts = [p for p in (tmp_path / ".work").iterdir() if p.suffix == ".part"]
    assert parts and parts[0].stat().st_size > 0  # the partial download is there, unpublished
    access = ShardAccess(storage_options=s3_server.storage_options, cache_dir=str(tmp_path))
    assert _read_all(access, url) == data  # the lock died with the process: this one fills
    assert Path(cache.lookup(url)).read_bytes() == data
    cache.evict()
    assert not [p for p in (tmp_path / ".work").iterdir() if p.suffix == ".part"]
