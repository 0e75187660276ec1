"""Repeated augmentation in the pure plan (``Mixture(repeats=k)``): exact counts, the copies of
a sample on k different ranks, every copy its own occurrence, coverage within k epochs, and
resume (same and other topology) with repeats."""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from loaders.plan import MixSource, Mixture, Segment, num_batches
from tests.support.plans import delivered, mixture_ids, plan_kw, resumed_kw

setups = st.fixed_dictionaries(
    {
        "sizes": st.lists(st.integers(1, 30), min_size=1, max_size=6),
        "repeats": st.integers(2, 4),
        "world_size": st.integers(1, 6),
        "num_workers": st.integers(0, 3),
        "batch_size": st.integers(1, 9),
        "uneven": st.sampled_from(["pad", "mask"]),
        "shuffle": st.booleans(),
        "seed": st.integers(0, 2**20),
        "epoch": st.integers(0, 20),
    }
)


def _mix(t: dict, repeats: int | None = None) -> Mixture:
    return Mixture((MixSource(tuple(t["sizes"]), key=3),), repeats=repeats or t["repeats"])


def _epoch(t: dict, mix: Mixture, epoch: int) -> list[list]:
    """Per rank, every real sample delivered in ``epoch``: ((source, shard, index), rep)."""
    args = {k: t[k] for k in ("num_workers", "batch_size", "uneven", "shuffle", "seed")}
    out = []
    for r in range(t["world_size"]):
        plan = plan_kw(mix, rank=r, world_size=t["world_size"], epoch=epoch, **args)
        out.append([(s, rep) for b in delivered(plan, mixture_ids) for s, rep, pad in b if not pad])
    return out


@settings(max_examples=200, deadline=None)
@given(setups)
def test_counts_copies_on_distinct_ranks_and_occurrences(t: dict) -> None:
    n, k, w = sum(t["sizes"]), t["repeats"], t["world_size"]
    mix = _mix(t)
    per_rank = _epoch(t, mix, t["epoch"])
    flat = [x for rank in per_rank for x in rank]
    assert len(flat) == n  # as many samples as without repeats (pad/mask: every planned one)
    assert len(set(flat)) == n  # every copy has its own occurrence (its own draws)
    counts = Counter(s for s, _rep in flat)
    d = -(-n // k)
    assert len(counts) == d  # ceil(N/k) distinct samples
    q, r = divmod(n, d)  # the d samples k times over, cut at n: k or k - 1 times each
    assert sorted(counts.values(), reverse=True) == [q + 1] * r + [q] * (d - r)
    if d >= k:  # any source of at least k * (k - 1) + 1 samples
        assert set(counts.values()) <= {k - 1, k}
    expected = num_batches(n, world_size=w, batch_size=t["batch_size"], uneven=t["uneven"])
    for r in range(w):
        plan = plan_kw(
            mix,
            rank=r,
            world_size=w,
            epoch=t["epoch"],
            **{k_: t[k_] for k_ in ("num_workers", "batch_size", "uneven", "shuffle", "seed")},
        )
        assert plan.num_batches == expected  # len() is exact
    if w >= k:
        ranks_of = defaultdict(set)
        for r, rank in enumerate(per_rank):
            for s, _rep in rank:
                ranks_of[s].add(r)
        assert all(len(ranks_of[s]) == c for s, c in counts.items())


@settings(max_examples=100, deadline=None)
@given(setups)
def test_every_sample_is_used_within_k_epochs(t: dict) -> None:
    n, k = sum(t["sizes"]), t["repeats"]
    mix = _mix(t)
    seen = set()
    for e in range(t["epoch"], t["epoch"] + k):
        seen |= {s for rank in _epoch(t, mix, e) for s, _rep in rank}
    assert len(seen) == n


@settings(max_examples=100, deadline=None)
@given(setups, st.integers(1, 6), st.floats(0.05, 0.95))
def test_resume_with_repeats_delivers_the_rest_exactly(t: dict, new_world: int, frac) -> None:
    """Interrupted after some batches, resumed on another world size: the rest of the epoch,
    copies and occurrences included, exactly once."""
    assume(t["uneven"] == "mask")  # every planned sample exactly once: an exact multiset
    mix = _mix(t)
    w = t["world_size"]
    args = {k: t[k] for k in ("num_workers", "batch_size", "uneven", "shuffle", "seed")}
    full = Counter(x for rank in _epoch(t, mix, t["epoch"]) for x in rank)
    first = [plan_kw(mix, rank=r, world_size=w, epoch=t["epoch"], **args) for r in range(w)]
    done_batches = int(first[0].num_batches * frac)
    got: Counter = Counter()
    for p in first:
        for b in delivered(p, mixture_ids)[:done_batches]:
            got.update((s, rep) for s, rep, pad in b if not pad)
    history = (Segment(w, t["num_workers"], t["batch_size"], done_batches),)
    for r in range(new_world):
        plan = resumed_kw(
            mix,
            history,
            rank=r,
            world_size=new_world,
            epoch=t["epoch"],
            shuffle_buffer=0,
            **args,
        )
        # a same-topology plan skips what was done
        for b in delivered(plan, mixture_ids)[plan.resume_at :]:
            got.update((s, rep) for s, rep, pad in b if not pad)
    assert got == full
