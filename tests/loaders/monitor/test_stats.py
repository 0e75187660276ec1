"""``loader.stats()`` against ground truth: the loop's own clock around ``next()``, the shard
bytes on disk, the bytes and requests a real web server saw, the cache's files; under worker
processes, decode threads, in-process, after a resume (DDP per rank:
tests/loaders/training/test_torchrun.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from loaders import make_loader
from tests.support.webserver import WebServer
from wdstool.base.retry import RetryPolicy

FAST = RetryPolicy(base_delay=0.02, max_delay=0.2, patience=20.0, read_timeout=2.0)


def _shard_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.tar"))


def _timed_epoch(loader, epoch: int = 0, step_s: float = 0.0) -> tuple[float, list]:
    """One pass; the loop's own waits in next(), and what it got."""
    loader.set_epoch(epoch)
    waited, got = 0.0, []
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        waited += time.perf_counter() - t0
        if batch is None:
            return waited, got
        got.append((list(batch["keys"]), batch["pixel_values"].clone()))
        if step_s:
            time.sleep(step_s)


@pytest.mark.parametrize(
    ("workers", "mode"), [(2, "process"), (2, "thread"), (0, "process")], ids=str
)
def test_stats_agree_with_the_loops_clock_and_the_shards(photos: Path, workers, mode) -> None:
    loader = make_loader(
        str(photos), 16, image_size=64, num_workers=workers, worker_mode=mode, seed=3
    )
    waited, got = _timed_epoch(loader)
    s = loader.stats()
    e = s.epoch_so_far
    assert (s.epoch, s.rank, s.step, s.worker_mode) == (0, 0, len(loader), mode)
    assert e.steps == len(loader) == len(got) and e.samples == 96
    # the training loop's waits, within 5% (and the few microseconds of its own clock reads)
    assert abs(e.wait_s - waited) <= 0.05 * waited + 0.002, (e.wait_s, waited)
    # every byte of every shard but the tar's end-of-archive blocks, read once
    data = _shard_bytes(photos)
    assert data - 4 * 10240 <= e.bytes_read <= data, (e.bytes_read, data)
    assert e.network_bytes == e.requests == e.retries == e.cache_hits == 0
    assert e.stages_s["decode"] > 0 and e.stages_s["resize"] > 0 and e.stages_s["read"] > 0
    assert e.stages_s["tail"] == 0  # the built-in recipe has no tail
    assert abs(sum(e.stage_shares.values()) - 1) < 1e-9
    assert 0 < e.worker_cpu <= 1.5
    assert 0 <= e.prefetch_occupancy <= 1
    # the workers' time making batches over the time there was; the waits after the first
    assert 0 < e.workers_busy <= 1
    assert 0 <= e.wait_per_batch_s * (e.steps - 1) <= e.wait_s - e.first_batch_s + 1e-9
    assert e.wait_per_batch_s <= e.longest_wait_s <= e.wait_s - e.first_batch_s + 1e-9
    assert s.flat()["loader/workers_busy"] == s.recent.workers_busy
    assert s.memory.processes == (1 + workers if mode == "process" else 1)
    flat = s.flat()
    assert flat["loader/epoch_samples"] == 96 and all(isinstance(v, float) for v in flat.values())
    # the next epoch starts from zero; the all-epochs window goes on counting
    _timed_epoch(loader, 1)
    s = loader.stats()
    assert s.epoch_so_far.samples == 96 and s.all_epochs.samples == 192


def test_a_tail_and_stats_off(photos: Path) -> None:
    """A pipeline with a tail shows tail time; ``stats=False`` gives the very same batches
    with no clocks (and ``stats()`` says so)."""
    from torchvision.transforms import v2

    pipe = v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip(), v2.ColorJitter(0.4)])
    on = make_loader(str(photos), 16, num_workers=1, transform=pipe, seed=5)
    off = make_loader(str(photos), 16, num_workers=1, transform=pipe, seed=5, stats=False)
    a, b = _timed_epoch(on)[1], _timed_epoch(off)[1]
    assert [k for k, _ in a] == [k for k, _ in b]
    assert all(torch.equal(x, y) for (_, x), (_, y) in zip(a, b, strict=True))
    assert on.stats().epoch_so_far.stages_s["tail"] > 0
    with pytest.raises(RuntimeError, match="stats=False"):
        off.stats()


def test_web_bytes_requests_retries_and_the_cache(photos: Path, tmp_path: Path) -> None:
    """Over HTTP: every shard's bytes received once (what the server sent, less what sat
    unread in the socket at the end), one request per shard plus the retry of a connection
    the server dropped; with cache_dir the first epoch misses every shard and the second hits
    every slice, asking the server for nothing."""
    data = _shard_bytes(photos)

    def loader(url: str, **kw):
        return make_loader(url, 16, image_size=64, num_workers=1, seed=1, retry=FAST, **kw)

    with WebServer(photos.parent) as probe:  # the requests make_loader itself makes
        loader(f"{probe.url}/{photos.name}")
        setup = len(probe.requests)
    # cut inside the first header of the first shard read (after its offsets: its slice
    # starts inside it)
    with WebServer(photos.parent, faults=["ok"] * (setup + 1) + ["drop:500"]) as srv:
        url = f"{srv.url}/{photos.name}"
        plain = loader(url)
        assert len(srv.requests) == setup
        _timed_epoch(plain)
        e = plain.stats().epoch_so_far
        # the shards' bytes, and the split shard's part of the offsets file pack wrote
        sent = srv.total_sent(".tar") + srv.total_sent(".npy")
        assert data - 4 * 10240 <= e.network_bytes <= sent
        assert data - 4 * 10240 <= e.bytes_read <= data
        # the server's own count: a GET per slice of a shard (5 slices here: one shard is read
        # in two, its end first and its start at the epoch's end, each from its recorded
        # offset), the read of that shard's offsets and the retry
        slices = 5
        assert e.requests == len(srv.requests) - setup == slices + 1 + 1
        assert e.retries == 1  # the dropped one, resumed at its byte
        cached = loader(url, cache_dir=tmp_path)
        _timed_epoch(cached, 0)
        first = cached.stats().epoch_so_far
        # each shard fetched once; the shard read in two slices is a hit the second time
        assert (first.cache_misses, first.cache_hits) == (4, slices - 4)
        asked = len(srv.requests)
        _timed_epoch(cached, 1)
        second = cached.stats().epoch_so_far
        assert (second.cache_misses, second.cache_hits) == (0, slices)
        assert second.network_bytes == second.requests == 0 and len(srv.requests) == asked


def test_stats_after_a_resume_count_the_rest_of_the_epoch(photos: Path) -> None:
    loader = make_loader(str(photos), 16, image_size=64, num_workers=2, seed=2)
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    del it
    resumed = make_loader(str(photos), 16, image_size=64, num_workers=2, seed=2)
    resumed.load_state_dict(state)
    _waited, got = _timed_epoch(resumed, state["epoch"])
    e = resumed.stats().epoch_so_far
    assert e.steps == len(got) == len(resumed) - 2
    assert e.samples == 96 - 32
