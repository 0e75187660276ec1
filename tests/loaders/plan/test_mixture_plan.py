"""Property tests of mixtures and exact evaluation in the pure plan: shares, repeats, the walk,
interleaving, equal batches on every rank, uneven="mask" covering every sample exactly once."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from loaders.plan import (
    MixSource,
    Mixture,
    RankPlan,
    Segment,
    apportion,
    num_batches,
)
from loaders.read import Located, worker_stream
from tests.support.plans import Sample, delivered, expand, mixture_ids, plan_kw, resumed_kw
from wdstool.base.errors import ConfigError

mixtures = st.fixed_dictionaries(
    {
        "sources": st.lists(
            st.tuples(
                st.lists(st.integers(0, 40), min_size=1, max_size=6).filter(lambda s: sum(s) > 0),
                st.sampled_from([0.1, 0.3, 1, 2, 7.5]),
            ),
            min_size=1,
            max_size=4,
        ),
        "epoch_size": st.none() | st.integers(1, 300),
        "world_size": st.integers(1, 6),
        "num_workers": st.integers(0, 3),
        "batch_size": st.integers(1, 16),
        "uneven": st.sampled_from(["pad", "drop", "mask"]),
        "shuffle": st.booleans(),
        "seed": st.integers(0, 2**30),
        "epoch": st.integers(0, 50),
    }
)


def build(t: dict) -> Mixture:
    return Mixture(
        tuple(MixSource(tuple(s), w, key=i) for i, (s, w) in enumerate(t["sources"])),
        t["epoch_size"],
    )


def ranks(t: dict, mix: Mixture | None = None) -> list[RankPlan]:
    mix = mix or build(t)
    args = {k: t[k] for k in ("num_workers", "batch_size", "uneven", "shuffle", "seed", "epoch")}
    return [
        plan_kw(mix, rank=r, world_size=t["world_size"], **args) for r in range(t["world_size"])
    ]


@settings(max_examples=250, deadline=None)
@given(mixtures)
def test_shares_repeats_equal_batches_and_mask_cover(t: dict) -> None:
    mix = build(t)
    n_total, w = mix.total, t["world_size"]
    assume(t["uneven"] != "drop" or n_total >= w)
    plans = ranks(t, mix)
    expected = num_batches(n_total, world_size=w, batch_size=t["batch_size"], uneven=t["uneven"])
    shapes = set()
    real: Counter[Sample] = Counter()
    pads = 0
    for p in plans:
        batches = delivered(p, mixture_ids)
        assert p.num_batches == expected == len(batches)
        shapes.add(tuple(len(b) for b in batches))
        for b in batches:
            for sample, _rep, pad in b:
                if pad:
                    pads += 1
                else:
                    real[sample] += 1
    assert len(shapes) == 1  # every rank: the same number of batches of the same sizes
    shares = mix.shares()
    assert sum(shares) == n_total
    per_source = Counter(s for s, _shard, _i in real.elements())
    for i, (sizes, _w) in enumerate(t["sources"]):
        n = sum(sizes)
        q, m = divmod(shares[i], n)
        counts = [real[(i, j, k)] for j, size in enumerate(sizes) for k in range(size)]
        if t["uneven"] == "drop":  # at most world_size - 1 samples left out, over all sources
            assert all(c <= q + (1 if m else 0) for c in counts)
        else:  # pad/mask: every planned sample exactly as often as planned
            assert per_source[i] == shares[i]
            assert sorted(set(counts)) <= [q, q + 1] and counts.count(q + 1) == m
    if t["uneven"] == "drop":
        assert sum(real.values()) == w * (n_total // w) and pads == 0
    else:
        assert pads == w * -(-n_total // w) - n_total


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 20), min_size=1, max_size=5),
    share=st.integers(1, 60),
    seed=st.integers(0, 1000),
)
def test_a_subsampled_source_walks_all_samples_before_any_repeats(sizes, share, seed) -> None:
    n = sum(sizes)
    assume(share < n)
    mix = Mixture((MixSource(tuple(sizes), 1.0, key=5),), epoch_size=share)
    taken: list[Sample] = []
    for epoch in range(-(-2 * n // share)):  # enough epochs to go round twice
        p = plan_kw(mix, seed=seed, epoch=epoch, rank=0, world_size=1, num_workers=0,
                       batch_size=7, uneven="mask")  # fmt: skip
        epoch_samples = [s for b in delivered(p, mixture_ids) for s, _r, pad in b if not pad]
        assert len(epoch_samples) == share and len(set(epoch_samples)) == share
        taken += epoch_samples
    for start in range(0, len(taken) - n + 1, share):
        assert len(set(taken[start : start + n])) == n  # any n in a row: all of them


def test_repeats_get_their_own_augmentation_draw_number() -> None:
    mix = Mixture((MixSource((5, 5)), MixSource((3,))), epoch_size=26)  # shares 13 and 13
    p = plan_kw(mix, seed=1, epoch=0, rank=0, world_size=1, num_workers=0, batch_size=4)
    reps: dict[Sample, set[int]] = {}
    for b in delivered(p, mixture_ids):
        for s, rep, _pad in b:
            reps.setdefault(s, set()).add(rep)
    assert {len(r) for s, r in reps.items() if s[0] == 1} == {4, 5}  # 13 = 4 x 3 + 1: 4 or 5
    for s, r in reps.items():  # each occurrence of a sample its own rep
        count = sum(1 for b in delivered(p, mixture_ids) for x, _, _ in b if x == s)
        assert len(r) == count


def test_interleaved_not_source_after_source() -> None:
    mix = Mixture((MixSource((400,) * 10, 0.7), MixSource((300,) * 10, 0.3)))  # 7,000 samples
    for rank in range(3):
        p = plan_kw(mix, seed=0, epoch=0, rank=rank, world_size=3, num_workers=2,
                       batch_size=64, shuffle=True)  # fmt: skip
        for wp in p.workers:
            ids = [s[0] for s, _r, _p in expand(wp.items)]
            for start in range(0, len(ids) - 640, 320):
                window = ids[start : start + 640]
                assert abs(window.count(0) / 640 - 0.7) < 0.01  # even before the shuffle
            assert abs(ids.count(0) - 0.7 * len(ids)) <= 1


def test_apportion_is_exact_and_proportional() -> None:
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]  # ties to the lower index
    assert apportion(100, [0.7, 0.3]) == [70, 30]
    assert sum(apportion(12345, [0.1, 0.25, 3, 1e-3])) == 12345


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epoch_size": 0}, "epoch_size must be >= 1"),
        ({"weights": (1, 0)}, "weight must be > 0"),
        ({"weights": (1, -2)}, "weight must be > 0"),
        ({"sizes": ((3,), (0, 0))}, "source 1 has no samples"),
    ],
)
def test_bad_mixtures_are_refused(kwargs, message) -> None:
    sizes = kwargs.get("sizes", ((3,), (4,)))
    weights = kwargs.get("weights", (1, 1))
    with pytest.raises(ConfigError, match=message):
        Mixture(
            tuple(MixSource(s, w) for s, w in zip(sizes, weights, strict=True)),
            kwargs.get("epoch_size"),
        )


def _located(run):
    return (
        Located("", (sl.source, sl.shard, i), sl.source, sl.rep, sl.pad)
        for sl in run
        for i in range(sl.start, sl.stop)
    )


def streamed(plan: RankPlan, buffer: int) -> list[list[tuple[Sample, bool]]]:
    """The batches a rank delivers, through the loader's own worker_stream (block shuffle
    included) over an identity reader, in DataLoader order: (sample, pad)."""
    per_worker = []
    for wp in plan.workers:
        out = list(worker_stream(wp, _located, shuffle_buffer=buffer, batch_size=plan.batch_size))
        sizes = [plan.batch_size] * wp.num_batches
        if sizes:
            sizes[-1] = wp.last_batch_size
        batches, pos = [], 0
        for n in sizes[wp.first_batch(plan.batch_size) :]:
            batches.append([(loc.sample, loc.pad) for loc in out[pos : pos + n]])
            pos += n
        per_worker.append(batches)
    firsts = [wp.first_batch(plan.batch_size) for wp in plan.workers]
    return [per_worker[w][b - firsts[w]] for w, b in plan.loader_order()]


@settings(max_examples=40, deadline=None)
@given(
    t=mixtures,
    frac=st.floats(0, 1),
    new_world=st.integers(1, 5),
    new_workers=st.integers(0, 3),
)
def test_elastic_resume_of_a_mixture_delivers_the_rest_exactly_once(
    t, frac, new_world, new_workers
):
    assume(t["uneven"] == "mask")
    buffer = 8
    mix = build(t)
    plans = ranks(t, mix)
    k = int(frac * plans[0].num_batches)
    seen: Counter[Sample] = Counter()
    full: Counter[Sample] = Counter()
    for p in plans:
        batches = streamed(p, buffer if t["shuffle"] else 0)
        for i, b in enumerate(batches):
            real = [x for x, pad in b if not pad]
            full.update(real)
            if i < k:
                seen.update(real)
    history = [Segment(t["world_size"], t["num_workers"], t["batch_size"], k)]
    args = {k2: t[k2] for k2 in ("batch_size", "uneven", "shuffle", "seed", "epoch")}
    rest: Counter[Sample] = Counter()
    counts = set()
    for r in range(new_world):
        p = resumed_kw(mix, history, rank=r, world_size=new_world, num_workers=new_workers,
                         shuffle_buffer=buffer, **args)  # fmt: skip
        batches = streamed(p, buffer if t["shuffle"] else 0)
        counts.add(len(batches))
        for b in batches:
            rest.update(x for x, pad in b if not pad)
    assert len(counts) == 1
    assert seen + rest == full  # every sample of the epoch, as often as planned, exactly
