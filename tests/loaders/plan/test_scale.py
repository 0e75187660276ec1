"""make_loader at cluster scale: 100,000 shards x 1,000 samples (10^8), 4,096 ranks x 8 workers.

Only the manifest is read (the shards need not exist); len() is equal on every rank; the
planning memory stays small. Timing is measured in the README, not asserted here.
"""

from __future__ import annotations

import json
import tracemalloc
import warnings
from collections import Counter
from pathlib import Path

import pytest

from loaders import make_loader
from loaders.plan import num_batches

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def huge_manifest(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("huge")
    shards = [
        {"url": f"train-{i:06d}.tar", "nsamples": 1000, "filesize": 10**8, "sha256": f"{i:064x}"}
        for i in range(100_000)
    ]
    manifest = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": shards}
    (d / "index.json").write_text(json.dumps(manifest))
    return d


def test_make_loader_plans_one_rank_of_4096_from_a_1e8_sample_manifest(huge_manifest: Path) -> None:
    expected = num_batches(10**8, world_size=4096, batch_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that 8 workers exceed this machine's cores
        tracemalloc.start()
        try:
            loader = make_loader(huge_manifest, 64, num_workers=8, rank=4095, world_size=4096)
            plan = loader.dataset.plan()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(loader) == expected == plan.num_batches
        assert peak < 200e6, peak
        samples = sum(len(s) for w in plan.workers for s in w.slices)
        assert samples == plan.num_samples == 24_415  # ceil(10^8 / 4096)
        for rank in (0, 2047):
            other = make_loader(huge_manifest, 64, num_workers=8, rank=rank, world_size=4096)
            assert len(other) == expected


@pytest.fixture(scope="module")
def ten_manifests(tmp_path_factory) -> list[Path]:
    """10 data sets of 10,000 shards x 1,000 samples each (10^8 in all); no shard exists."""
    root = tmp_path_factory.mktemp("ten")
    out = []
    for s in range(10):
        d = root / f"src{s}"
        d.mkdir()
        shards = [
            {"url": f"s{s}-{i:06d}.tar", "nsamples": 1000, "filesize": 10**8, "sha256": ""}
            for i in range(10_000)
        ]
        manifest = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": shards}
        (d / "index.json").write_text(json.dumps(manifest))
        out.append(d)
    return out


def test_a_ten_source_mixture_plans_one_rank_of_4096_from_manifests(ten_manifests) -> None:
    """make_loader + len + the rank's plan, and an elastic resume of a 4,096-rank state on 2,048
    ranks: manifests only (no shard is opened: none exists), small memory. Timing: make bench
    / bench/plan_bench.py."""
    from loaders import Source

    sources = [Source(d, weight=1 + i % 3) for i, d in enumerate(ten_manifests)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracemalloc.start()
        try:
            loader = make_loader(sources, 64, num_workers=8, rank=4095, world_size=4096)
            plan = loader.dataset.plan()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(loader) == plan.num_batches == num_batches(10**8, world_size=4096, batch_size=64)
        assert peak < 200e6, peak
        state = loader.state_dict()
        state["segments"][-1]["batches"] = state["batches"] = 200
        resumed = make_loader(sources, 64, num_workers=8, rank=2047, world_size=2048)
        resumed.load_state_dict(state)
        rest = resumed.dataset.plan()
        # what the 4,096 ranks had not delivered, spread over 2,048: about twice a rank's share
        per_old_rank = plan.num_samples - 200 * 64
        assert abs(rest.num_samples - 2 * per_old_rank) <= 2


def test_state_dict_costs_the_same_at_step_1e5_and_builds_no_plan(
    huge_manifest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saving the state is O(1) in the step (no per-step snapshot, no plan, no shard read):
    at step 10 and step 10^5 of a 10^8-sample epoch the same work, counted in plans built and
    in bytes allocated; inside a resumed epoch too. Timing: bench/state_bench.py."""
    import loaders.dataset

    planned = Counter()
    for name in ("plan_epoch", "plan_resumed"):
        real = getattr(loaders.dataset, name)

        def counted(*a, _real=real, _name=name, **kw):
            planned[_name] += 1
            return _real(*a, **kw)

        monkeypatch.setattr(loaders.dataset, name, counted)

    def saved(loader, step: int) -> tuple[dict, int]:
        loader.batches_delivered = step  # what iterating `step` batches leaves
        loader.state_dict()  # warm (the first call imports `fractions`)
        tracemalloc.start()
        try:
            state = loader.state_dict()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return state, peak

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = make_loader(huge_manifest, 64, num_workers=8, rank=3, world_size=8)
        assert len(loader) == 195_313
        (early, early_peak), (late, late_peak) = saved(loader, 10), saved(loader, 10**5)
        assert not planned
        assert late["batches"] == 10**5 and early["batches"] == 10
        same = json.loads(json.dumps(late))
        same["batches"] = same["segments"][-1]["batches"] = 10
        assert same == early  # only the counter differs: the state does not grow with the step
        assert late_peak < 50_000 and abs(late_peak - early_peak) < 500, (early_peak, late_peak)
        resumed = make_loader(huge_manifest, 64, num_workers=8, rank=3, world_size=8)
        resumed.load_state_dict(late)  # plans the rest of the epoch, once
        assert planned == Counter(plan_resumed=1)
        assert (len(resumed), resumed.start_batch) == (195_313, 10**5)
        state, peak = saved(resumed, 10)
        assert planned == Counter(plan_resumed=1)  # saving again planned nothing
        assert state["batches"] == 10**5 + 10 and peak < 50_000
