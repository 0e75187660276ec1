"""Property tests of the pure epoch plan: cover, equal batches, determinism, scale."""

from __future__ import annotations

import time
import tracemalloc
from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from loaders.plan import RankPlan, Slice, num_batches, samples_per_rank
from tests.support.plans import delivered, plan_kw
from wdstool.base.errors import ConfigError

topologies = st.fixed_dictionaries(
    {
        "shard_sizes": st.lists(st.integers(0, 300), min_size=1, max_size=40).filter(
            lambda s: sum(s) > 0
        ),
        "world_size": st.integers(1, 8),
        "num_workers": st.integers(0, 8),
        "batch_size": st.integers(1, 64),
        "uneven": st.sampled_from(["pad", "drop"]),
        "drop_last": st.booleans(),
        "shuffle": st.booleans(),
        "seed": st.integers(0, 2**40),
        "epoch": st.integers(0, 1000),
    }
)


def all_ranks(t: dict) -> list[RankPlan]:
    args = {k: v for k, v in t.items() if k != "shard_sizes"}
    return [plan_kw(t["shard_sizes"], rank=r, **args) for r in range(t["world_size"])]


@settings(max_examples=300, deadline=None)
@given(topologies)
def test_equal_batches_exact_len_and_cover(t: dict) -> None:
    n, w = sum(t["shard_sizes"]), t["world_size"]
    assume(t["uneven"] == "pad" or n >= w)
    plans = all_ranks(t)
    expected_len = num_batches(
        n, world_size=w, batch_size=t["batch_size"], uneven=t["uneven"], drop_last=t["drop_last"]
    )
    s = samples_per_rank(n, world_size=w, uneven=t["uneven"])
    counts: Counter[tuple[int, int]] = Counter()
    for p in plans:
        assert p.num_batches == expected_len == len(p.batch_order())
        batches = delivered(p)
        assert len(batches) == expected_len
        assert all(len(b) == t["batch_size"] for b in batches[:-1])  # all full but the last
        if t["drop_last"] and batches:
            assert len(batches[-1]) == t["batch_size"]
        for wp in p.workers:
            for sl in wp.slices:
                assert 0 <= sl.start < sl.stop <= t["shard_sizes"][sl.shard]
        counts.update(x for b in batches for x in b)
    assert len({p.num_samples for p in plans}) == 1
    if t["uneven"] == "drop":
        assert max(counts.values(), default=1) == 1  # never twice in an epoch
        if not t["drop_last"]:
            assert sum(counts.values()) == w * (n // w)
    elif not t["drop_last"]:
        assert len(counts) == n  # every sample at least once
        assert sum(counts.values()) == w * s
        assert sum(c - 1 for c in counts.values()) == w * s - n
        if n >= w:
            assert max(counts.values()) <= 2 and w * s - n <= w - 1


@settings(max_examples=100, deadline=None)
@given(topologies)
def test_deterministic(t: dict) -> None:
    assume(t["uneven"] == "pad" or sum(t["shard_sizes"]) >= t["world_size"])
    assert all_ranks(t) == all_ranks(t)


# An epoch's plan order is one of (shards! x N) choices (shard permutation x rotation), so two
# epochs of a 2-shard, 50-sample set coincide ~1% of the time; the buffer seeds still differ, so
# the loader's order does not. The example set is fixed (derandomize) so CI cannot flake on a
# legitimate coincidence; the condition keeps the chance per example below 1e-4.
@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    st.lists(st.integers(1, 200), min_size=4, max_size=30).filter(lambda s: sum(s) >= 200),
    st.integers(0, 2**32),
    st.integers(0, 100),
)
def test_each_epoch_a_different_permutation(sizes: list[int], seed: int, epoch: int) -> None:
    def plan(e: int) -> RankPlan:
        return plan_kw(sizes, seed=seed, epoch=e, rank=0, world_size=1, num_workers=3, batch_size=7)

    pa, pb = plan(epoch), plan(epoch + 1)
    a = [x for bt in delivered(pa) for x in bt]
    b = [x for bt in delivered(pb) for x in bt]
    universe = sorted((i, j) for i, n in enumerate(sizes) for j in range(n))
    assert sorted(a) == universe and sorted(b) == universe
    assert a != b
    assert [w.shuffle_seed for w in pa.workers] != [w.shuffle_seed for w in pb.workers]


def test_tiny_datasets_still_reshuffle_through_buffer_seeds() -> None:
    for epoch in range(20):
        a = plan_kw(
            [24, 26], seed=1, epoch=epoch, rank=0, world_size=1, num_workers=2, batch_size=7
        )
        b = plan_kw(
            [24, 26], seed=1, epoch=epoch + 1, rank=0, world_size=1, num_workers=2, batch_size=7
        )
        assert all(
            x.shuffle_seed != y.shuffle_seed for x, y in zip(a.workers, b.workers, strict=True)
        )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=10).filter(lambda s: sum(s) > 0),
    st.integers(1, 5),
    st.integers(0, 4),
    st.integers(1, 9),
)
def test_no_shuffle_is_natural_order(sizes: list[int], w: int, k: int, b: int) -> None:
    n = sum(sizes)
    assume(n >= w)
    natural = [(i, j) for i, m in enumerate(sizes) for j in range(m)]
    got = []
    for r in range(w):
        p = plan_kw(
            sizes,
            seed=1,
            epoch=3,
            rank=r,
            world_size=w,
            num_workers=k,
            batch_size=b,
            shuffle=False,
            uneven="drop",
        )
        assert all(wp.shuffle_seed is None for wp in p.workers)
        # within a rank, workers read consecutive chunks of the rank's span
        got.extend(
            (s.shard, i) for wp in p.workers for s in wp.slices for i in range(s.start, s.stop)
        )
    q, r = divmod(n, w)
    starts = [k * q + min(k, r) for k in range(w)]  # rank k's span; drop keeps its first q
    assert got == [x for k in range(w) for x in natural[starts[k] : starts[k] + q]]


def test_fewer_shards_than_workers_splits_at_sample_level() -> None:
    p = plan_kw([100], seed=0, epoch=0, rank=1, world_size=2, num_workers=4, batch_size=10)
    assert [wp.num_samples for wp in p.workers] == [20, 10, 10, 10]
    assert all(wp.slices for wp in p.workers)  # nobody idles, nobody crashes empty


def test_single_shard_ranks_see_different_samples_each_epoch() -> None:
    spans = [
        {
            i
            for s in plan_kw(
                [1000], seed=0, epoch=e, rank=0, world_size=4, num_workers=1, batch_size=50
            )
            .workers[0]
            .slices
            for i in range(s.start, s.stop)
        }
        for e in range(3)
    ]
    assert spans[0] != spans[1] != spans[2]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shard_sizes": [], "rank": 0, "world_size": 1},
        {"shard_sizes": [0, 0], "rank": 0, "world_size": 1},
        {"shard_sizes": [-1, 5], "rank": 0, "world_size": 1},
        {"shard_sizes": [5], "rank": 2, "world_size": 2},
        {"shard_sizes": [5], "rank": 0, "world_size": 0},
        {"shard_sizes": [5], "rank": 0, "world_size": 1, "batch_size": 0},
        {"shard_sizes": [5], "rank": 0, "world_size": 1, "num_workers": -1},
        {"shard_sizes": [5], "rank": 0, "world_size": 1, "uneven": "maybe"},
        {"shard_sizes": [3], "rank": 0, "world_size": 4, "uneven": "drop"},
        {"shard_sizes": [5], "rank": 0, "world_size": 1, "epoch": -1},
    ],
)
def test_invalid_arguments(kwargs: dict) -> None:
    args = {"seed": 0, "epoch": 0, "num_workers": 0, "batch_size": 4, **kwargs}
    with pytest.raises(ConfigError):
        plan_kw(args.pop("shard_sizes"), **args)


def test_slice_len() -> None:
    assert len(Slice(3, 10, 25)) == 15


@pytest.mark.slow
def test_scale_1e8_samples_4096_ranks() -> None:
    """10^8 samples in 100,000 shards, 4,096 ranks x 8 workers: plan cost is O(shards + share)."""
    sizes = [1000] * 100_000
    tracemalloc.start()
    started = time.perf_counter()
    for rank in (0, 1234, 4095):
        p = plan_kw(
            sizes, seed=7, epoch=3, rank=rank, world_size=4096, num_workers=8, batch_size=256
        )
        assert p.num_samples == 24_415  # ceil(1e8 / 4096)
        assert sum(wp.num_samples for wp in p.workers) == p.num_samples
        assert p.num_batches == num_batches(10**8, world_size=4096, batch_size=256)
        assert sum(len(wp.slices) for wp in p.workers) <= 8 * 3 + 26 + 1
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"\nplan for 3 ranks of 4,096 over 1e8 samples: {elapsed:.3f} s, peak {peak / 1e6:.1f} MB"
    )
    assert peak < 200e6
