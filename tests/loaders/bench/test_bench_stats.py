"""stream-bench's statistics by value, on synthetic timings: wait percentiles, spikes
(> mean + 2σ, README), idle share, pairwise ratios and their median, medians over repeats,
efficiency against the ceiling, and the worker recommendation.

``measure`` reads ``time.perf_counter``; here it reads a clock that only the synthetic loader
moves (each batch takes exactly its planned wait), so every figure is known in advance and no
assert depends on this machine's speed.
"""

from __future__ import annotations

import math
import types

import pytest

import loaders.bench.measure as measure_mod
from loaders.bench.bench_config import BenchConfig
from loaders.bench.measure import RunResult, measure, percentiles, recommend
from loaders.bench.report import render_text
from loaders.bench.summary import _ratios
from loaders.bench.summary import summarize as _report


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Batches:
    """Batches of ``size`` samples; fetching batch i takes ``waits_ms[i]`` on ``clock``."""

    def __init__(self, clock: Clock, waits_ms: list[float], size: int = 4) -> None:
        self.clock, self.waits, self.size = clock, waits_ms, size

    def __iter__(self):
        for w in self.waits:
            self.clock.now += w / 1000
            yield list(range(self.size))


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(
        measure_mod, "time", types.SimpleNamespace(perf_counter=c.perf_counter, sleep=c.sleep)
    )
    return c


def _measure(clock: Clock, waits_ms: list[float], **kw) -> RunResult:
    return measure(
        "wdstool",
        lambda: Batches(clock, waits_ms),
        workers=0,
        batch_len=len,
        batch_bytes=lambda b: 1000 * len(b),
        **kw,
    )


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(101, 0, -1)]  # 101..1, unsorted on purpose
    assert percentiles(values) == {
        "mean": 51.0, "min": 1.0, "p50": 51.0, "p95": 96.0, "p99": 100.0, "max": 101.0,
    }  # fmt: skip
    assert percentiles([7.0]) == dict.fromkeys(("mean", "min", "p50", "p95", "p99", "max"), 7.0)
    four = percentiles([4.0, 1.0, 3.0, 2.0])  # ranks round((n-1)p): p50 at index round(1.5) = 2
    assert (four["p50"], four["p95"], four["p99"], four["mean"]) == (3.0, 4.0, 4.0, 2.5)
    assert percentiles([]) == {}


def test_measure_throughput_waits_and_spikes(clock: Clock) -> None:
    # a first batch of 500 ms (time to first batch, not timed), then 29 waits of 5 ms and one
    # of 100 ms: mean 8.17 ms, sd 17.05 ms, so only the 100 ms wait is a spike (> 42.3 ms)
    waits = [500.0] + [5.0] * 20 + [100.0] + [5.0] * 9
    r = _measure(clock, waits)
    assert r.time_to_first_batch == pytest.approx(0.5)
    assert r.batches == 30 and r.samples == 120
    assert r.waits == pytest.approx(waits[1:])
    assert r.seconds == pytest.approx(0.245)
    assert r.samples_per_s == pytest.approx(120 / 0.245)
    assert r.mb_per_s == pytest.approx(120 * 1000 / 1e6 / 0.245)
    assert r.idle_pct == pytest.approx(100.0)  # no step: the loop only waited
    assert r.spikes == 1
    assert r.wait_ms["p50"] == pytest.approx(5.0) and r.wait_ms["max"] == pytest.approx(100.0)
    assert r.wait_ms["mean"] == pytest.approx(245 / 30)


def test_spikes_are_waits_above_mean_plus_two_sigma(clock: Clock) -> None:
    steady = _measure(clock, [1.0] + [5.0] * 12)
    assert steady.spikes == 0  # sd 0: nothing above the mean
    two = [1.0] + [5.0] * 40 + [60.0, 80.0]
    timed = two[1:]
    mean = sum(timed) / len(timed)
    sd = math.sqrt(sum((w - mean) ** 2 for w in timed) / len(timed))
    assert sum(w > mean + 2 * sd for w in timed) == 2  # the two long waits, by the definition
    assert _measure(clock, two).spikes == 2
    # close to the bound: 3 waits of 9 among 5s (mean 5.6, sd 1.43, bound 8.46) are spikes
    assert _measure(clock, [1.0] + [5.0] * 17 + [9.0] * 3).spikes == 3


def test_step_time_is_not_idle_time(clock: Clock) -> None:
    """A 20 ms step after every 5 ms wait: idle 5 / 25 = 20% of the timed pass."""
    r = _measure(clock, [50.0] + [5.0] * 10, step_ms=20)
    assert r.seconds == pytest.approx(10 * 0.025)
    assert r.idle_pct == pytest.approx(20.0)
    assert r.samples_per_s == pytest.approx(40 / 0.25)


def test_warmup_batches_are_not_timed(clock: Clock) -> None:
    r = _measure(clock, [50.0, 30.0, 30.0] + [5.0] * 4, warmup=2)
    assert r.batches == 4 and r.samples == 16 and r.seconds == pytest.approx(0.02)
    assert r.time_to_first_batch == pytest.approx(0.05)


def _run(name: str, workers: int, sps: float, p50: float = 2.0, p99: float = 3.0) -> RunResult:
    return RunResult(
        name=name, workers=workers, samples_per_s=sps, wait_ms={"p50": p50, "p99": p99}
    )


def test_ratios_pair_runs_of_the_same_workers_and_repeat() -> None:
    runs = [
        _run("wdstool", 1, 100), _run("webdataset", 1, 50),
        _run("wdstool", 1, 120), _run("webdataset", 1, 40),
        _run("wdstool", 1, 90), _run("webdataset", 1, 90),
        _run("wdstool", 2, 300), _run("webdataset", 2, 0),  # no throughput: no pair
        _run("imagefolder", 2, 100),
    ]  # fmt: skip
    assert _ratios(runs, "wdstool", "webdataset") == {
        "median": 2.0, "min": 1.0, "max": 3.0, "pairs": 3,
    }  # fmt: skip
    assert _ratios(runs, "wdstool", "imagefolder") == {
        "median": 3.0, "min": 3.0, "max": 3.0, "pairs": 1,
    }  # fmt: skip
    assert _ratios(runs, "wdstool", "webdataset-fast") is None


def test_recommendation_takes_fewest_workers_within_tolerance() -> None:
    runs = [
        _run("wdstool", 1, 100), _run("wdstool", 1, 110),
        _run("wdstool", 2, 190, p50=2, p99=10), _run("wdstool", 2, 200, p50=2, p99=12),
        _run("wdstool", 4, 198), _run("wdstool", 4, 204),
        _run("webdataset", 1, 1000),  # other pipelines do not count
    ]  # fmt: skip
    rec = recommend(runs)
    # medians 105, 195, 201: 195 >= 0.95 * 201, so 2 workers; p99 11 > 2 x p50 2: bursty
    assert (rec["num_workers"], rec["prefetch_factor"]) == (2, 4)
    assert "195 samples/s" in rec["why"] and "(201)" in rec["why"] and "p99 11.0" in rec["why"]
    assert recommend(runs, tolerance=0.01)["num_workers"] == 4
    steady = [_run("wdstool", 1, 100, p50=4, p99=7), _run("wdstool", 3, 101, p50=4, p99=9)]
    rec = recommend(steady)
    assert (rec["num_workers"], rec["prefetch_factor"]) == (1, 2)  # 9 > 2 x 4 would be bursty
    tiny = [_run("wdstool", 1, 100, p50=0.2, p99=1.9)]  # p50 under 1 ms counts as 1 ms
    assert recommend(tiny)["prefetch_factor"] == 2
    assert recommend([_run("wdstool", 1, 0.0), _run("webdataset", 1, 5)]) == {}


def test_report_medians_over_repeats_efficiency_and_text() -> None:
    cfg = BenchConfig(source="unused", workers=(1, 2), repeats=3)
    runs = [
        _run("wdstool", 1, 100), _run("wdstool", 1, 140), _run("wdstool", 1, 120),
        _run("webdataset", 1, 60), _run("webdataset", 1, 70), _run("webdataset", 1, 40),
        _run("wdstool", 2, 200), _run("wdstool", 2, 220), _run("wdstool", 2, 210),
    ]  # fmt: skip
    report = _report(cfg, runs, {1: {"samples_per_s": 150.0}}, False, 1000.0)
    rows = {(r["pipeline"], r["workers"]): r for r in report["summary"]}
    assert rows.keys() == {("wdstool", 1), ("wdstool", 2), ("webdataset", 1)}
    assert rows["wdstool", 1]["samples_per_s"] == 120 and rows["wdstool", 1]["runs"] == 3
    assert rows["wdstool", 1]["efficiency"] == pytest.approx(120 / 150)
    assert "efficiency" not in rows["wdstool", 2]  # no ceiling measured at 2 workers
    assert rows["webdataset", 1]["samples_per_s"] == 60
    # pairs 100/60, 140/70, 120/40 -> 1.67, 2.0, 3.0
    assert report["ratios"]["wdstool/webdataset"] == {
        "median": 2.0, "min": pytest.approx(100 / 60), "max": 3.0, "pairs": 3,
    }  # fmt: skip
    assert report["recommendation"]["num_workers"] == 2  # 210 against 120
    text = "\n".join(render_text(report))
    assert "ratio wdstool/webdataset: median 2.00 (range 1.67-3.00, 3 pairs)" in text
    assert "recommendation: num_workers=2, prefetch_factor=2." in text
    assert "ceiling (1 process, decode+augment, no loader): 150 samples/s" in text
    one_worker_count = BenchConfig(source="unused", workers=(1,), repeats=3)
    assert _report(one_worker_count, runs[:3], {}, False, 0.0)["recommendation"] == {}
