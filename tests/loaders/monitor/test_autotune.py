"""``num_workers="auto"`` / ``prefetch_factor="auto"`` / ``memory_budget``: the loader sizes
itself from what it measures, and whatever it picks, epochs keep their samples and pixels, the
order is the plan's for the count in force, and an exact resume stays exact."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from loaders import make_loader
from loaders.make import default_num_workers
from wdstool.base.errors import ConfigError

CORES = default_num_workers()
needs_two = pytest.mark.skipif(CORES < 2, reason="autotuning workers needs 2 cores to choose from")


def _epoch(loader, epoch: int, step_s: float = 0.0) -> list[tuple[str, bytes]]:
    loader.set_epoch(epoch)
    out = []
    for batch in loader:
        out += [
            (k, bytes(p.numpy())) for k, p in zip(batch["keys"], batch["pixel_values"], strict=True)
        ]
        if step_s:
            time.sleep(step_s)
    return out


def _loader(photos: Path, batch: int = 2, **kw):
    return make_loader(str(photos), batch, image_size=32, seed=4, **kw)


@needs_two
def test_decode_threads_shrink_while_the_step_is_slow_and_grow_back(photos: Path) -> None:
    """Epoch 0 with a slow step: fewer threads decode (the loop never waits for them); epoch 1
    with no step: input-bound, a thread comes back. Every batch is the one a fixed loader
    with as many threads as the plan's streams gives: those never change, only how many
    threads decode at once."""
    auto = _loader(photos, num_workers="auto", worker_mode="thread")
    streams = min(8, 2 * CORES)  # up to 2 threads a core; one a core and one more at first
    start = min(streams, CORES + 1)
    assert auto.topology.num_workers == streams and auto.stats().workers == start
    fixed = _loader(photos, num_workers=streams, worker_mode="thread")
    assert _epoch(auto, 0, step_s=0.02) == _epoch(fixed, 0)
    shrunk = auto.stats()
    assert shrunk.workers < start and "not input-bound" in shrunk.autotune
    assert _epoch(auto, 1) == _epoch(fixed, 1)
    # epoch 1 was input-bound: a thread came back (and stayed if it paid: under a busy
    # machine, the parallel suite, a second thread may make no more, and is taken back)
    grew = [c for c in auto.autotuner.changes if c[0] == 1 and c[4].startswith("input-bound")]
    assert grew and grew[0][2] == shrunk.workers + 1, auto.autotuner.changes
    after = auto.autotuner.changes[-1]
    assert after == grew[-1] or "back to" in after[4], auto.autotuner.changes
    assert any(why.startswith("not input-bound") for *_, why in auto.autotuner.changes)


@needs_two
def test_worker_processes_are_revised_between_epochs_and_resume_exactly(photos: Path) -> None:
    """Epoch 0 with a slow step: the next epoch runs one worker fewer, planned for that count
    (the order of a fixed loader with that count, the same pixels per sample); its state
    records the count, and a new auto loader resumed from it finishes the epoch exactly as the
    uninterrupted one does."""
    auto = _loader(photos, 2, num_workers="auto")
    assert auto.topology.num_workers == CORES
    first = _epoch(auto, 0, step_s=0.03)
    assert first == _epoch(_loader(photos, 2, num_workers=CORES), 0)
    auto.set_epoch(1)  # the epoch boundary: revised here
    k = auto.topology.num_workers
    assert k == CORES - 1 and auto.stats().workers == k
    assert auto.autotuner.changes[-1][:3] == (0, 48, k)
    second = _epoch(auto, 1)
    assert second == _epoch(_loader(photos, 2, num_workers=k), 1)
    assert sorted(second) == sorted(_epoch(_loader(photos, 2, num_workers=CORES), 1))

    # an exact resume: 7 batches into epoch 1, saved; a new auto loader (starting with all the
    # cores) takes the state, adopts the count the epoch ran with and delivers the rest
    auto.set_epoch(1)
    it = iter(auto)
    for _ in range(7):
        next(it)
    state = auto.state_dict()
    del it
    assert state["segments"][-1]["num_workers"] == k
    resumed = _loader(photos, 2, num_workers="auto")
    resumed.load_state_dict(state)
    assert resumed.topology.num_workers == k
    assert _epoch(resumed, 1) == second[7 * 2 :]


def test_the_memory_budget_is_kept(photos: Path) -> None:
    """A budget that holds this process and one worker starts one worker and never adds one;
    a budget below this process is an error; "auto" prefetch starts at 2."""
    from loaders.monitor.memory import owned_memory

    budget = owned_memory() + (100 << 20)
    auto = _loader(photos, num_workers="auto", prefetch_factor="auto", memory_budget=budget)
    assert auto.topology.num_workers == 1 and auto.config.workers.prefetch_factor == 2
    for e in range(2):
        _epoch(auto, e)
        auto.set_epoch(e + 1)
        assert auto.topology.num_workers == 1
    threads = _loader(photos, num_workers="auto", worker_mode="thread", memory_budget=budget)
    assert threads.autotuner.active(threads) >= 1
    with pytest.raises(ConfigError, match="below what this process already holds"):
        _loader(photos, num_workers="auto", memory_budget="1MB")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(num_workers="many"), 'num_workers=.many.: give an int or "auto"'),
        (dict(prefetch_factor="deep"), 'prefetch_factor=.deep.: give an int or "auto"'),
        (dict(num_workers=2, memory_budget="4GB"), "memory_budget applies to"),
        (dict(num_workers="auto", memory_budget=1.5), r"share of the host is in \(0, 1\]"),
        (dict(num_workers="auto", memory_budget="lots"), "memory_budget: "),
    ],
)
def test_bad_auto_settings_are_one_line_errors(photos: Path, kw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _loader(photos, **kw)


def test_auto_prefetch_deepens_on_bursts_between_epochs(photos: Path) -> None:
    """A loop that runs 12 slow steps, then 12 instant ones: the worker keeps up on average,
    yet the instant steps drain the queue and wait; the queue deepens (processes: for the
    next epoch)."""
    auto = _loader(photos, num_workers=1, prefetch_factor="auto")
    auto.set_epoch(0)
    for i, _ in enumerate(auto):
        if (i // 12) % 2 == 0:
            time.sleep(0.008)
    auto.set_epoch(1)
    assert auto.config.workers.prefetch_factor == 3, auto.autotuner.changes
    assert "deeper prefetch" in auto.stats().autotune
