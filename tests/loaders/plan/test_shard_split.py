"""``split="shards"`` in the pure plan: each rank's share is whole shards (no shard of a pass
read by two ranks), every rank takes the same number of batches (``len``: the same every epoch,
from the sizes alone), the epoch holds the same samples as ``split="samples"`` (under
``uneven="mask"``: every sample exactly once, the padding flagged), padding stays within the
largest shard, and an interrupted epoch resumes exactly, on the same or another world size."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.plan import MixSource, Mixture, Segment, batches_of, samples_per_rank, shard_slack
from tests.support.plans import delivered, expand, mixture_ids, plan_kw, resumed_kw
from wdstool.base.errors import ConfigError

setups = st.fixed_dictionaries(
    {
        "sizes": st.lists(st.integers(1, 30), min_size=4, max_size=24),
        "world_size": st.integers(1, 4),
        "num_workers": st.integers(0, 3),
        "batch_size": st.integers(1, 9),
        "uneven": st.sampled_from(["pad", "mask"]),
        "shuffle": st.booleans(),
        "seed": st.integers(0, 2**20),
        "epoch": st.integers(0, 9),
    }
).filter(lambda t: len(t["sizes"]) >= t["world_size"])


def _plans(t: dict, split: str = "shards", data=None) -> list:
    """Every rank's plan; the shard order shuffled where ``shuffle``, not the samples inside a
    worker's blocks (``delivered`` lists the planned order)."""
    args = {k: t[k] for k in ("num_workers", "batch_size", "uneven", "shuffle", "seed", "epoch")}
    args["shuffle_buffer"] = 0
    data = data if data is not None else t["sizes"]
    return [
        plan_kw(data, rank=r, world_size=t["world_size"], split=split, **args)
        for r in range(t["world_size"])
    ]


def _real(plan) -> list:
    return [(s, rep) for wp in plan.workers for s, rep, pad in mixture_ids(wp) if not pad]


@settings(max_examples=150, deadline=None)
@given(setups)
def test_ranks_read_whole_shards_and_take_the_same_steps(t: dict) -> None:
    plans = _plans(t)
    mix = Mixture((MixSource(tuple(t["sizes"])),))
    per_rank = samples_per_rank(
        sum(t["sizes"]), world_size=t["world_size"], uneven=t["uneven"], slack=shard_slack(mix)
    )
    want = batches_of(per_rank, t["batch_size"])
    assert {p.num_batches for p in plans} == {want}  # len(loader), from the sizes alone
    readers: dict[tuple, set[int]] = {}
    for r, p in enumerate(plans):
        assert len(delivered(p, mixture_ids)) == want
        for (source, shard, _), rep in _real(p):
            readers.setdefault((source, shard, rep), set()).add(r)
        pads = sum(pad for wp in p.workers for *_, pad in mixture_ids(wp))
        assert pads <= 2 * shard_slack(mix) + 1  # its cuts move by less than a shard each
    assert all(len(rs) == 1 for rs in readers.values()), "a shard read by two ranks"
    # the same samples as a split by samples: every one exactly once
    got = Counter(x for p in plans for x in _real(p))
    assert got == Counter(x for p in _plans(t, "samples") for x in _real(p))
    assert sorted(s for (s, _rep) in got) == sorted(
        (0, shard, i) for shard, n in enumerate(t["sizes"]) for i in range(n)
    )


@settings(max_examples=80, deadline=None)
@given(
    setups,
    st.lists(
        st.tuples(st.lists(st.integers(1, 25), min_size=2, max_size=8), st.sampled_from([1, 2.5])),
        min_size=2,
        max_size=3,
    ),
    st.none() | st.integers(20, 200),
)
def test_a_mixture_keeps_its_shares_and_equal_steps(t: dict, sources, epoch_size) -> None:
    mix = Mixture(
        tuple(MixSource(tuple(s), w, key=i) for i, (s, w) in enumerate(sources)), epoch_size
    )
    if sum(len(s) for s, _ in sources) < t["world_size"]:
        return
    plans = _plans(t, data=mix)
    assert len({p.num_batches for p in plans}) == 1
    got = Counter(x for p in plans for x in _real(p))
    assert got == Counter(x for p in _plans(t, "samples", mix) for x in _real(p))


@settings(max_examples=60, deadline=None)
@given(setups, st.integers(1, 4), st.integers(0, 3), st.data())
def test_an_interrupted_epoch_resumes_on_any_world_size(t: dict, world, workers, data) -> None:
    """Stopped after some batches; the rest on another topology (elastic: what is left split
    by samples, as for any epoch): every sample of the epoch is delivered once in all."""
    t = {**t, "uneven": "mask"}
    if (world, workers) == (t["world_size"], t["num_workers"]):
        workers += 1  # another topology: the same one resumes by skipping (test_resume_plan)
    first = _plans(t)
    stop = data.draw(st.integers(0, first[0].num_batches))
    before = [x for p in first for b in delivered(p, mixture_ids)[:stop] for x in b]
    history = [Segment(t["world_size"], t["num_workers"], t["batch_size"], stop)]
    args = {k: t[k] for k in ("batch_size", "uneven", "shuffle", "seed", "epoch")}
    args["shuffle_buffer"] = 0
    after = []
    for r in range(world):
        p = resumed_kw(
            t["sizes"],
            history,
            rank=r,
            world_size=world,
            num_workers=workers,
            split="shards",
            **args,
        )
        after += [x for b in delivered(p, mixture_ids) for x in b]
    real = Counter((s, rep) for s, rep, pad in before + after if not pad)
    assert real == Counter(((0, sh, i), 0) for sh, n in enumerate(t["sizes"]) for i in range(n))


def test_the_pass_starts_between_shards_and_padding_repeats_the_ranks_own() -> None:
    plans = _plans(
        {
            "sizes": [7, 3, 9, 5],
            "world_size": 2,
            "num_workers": 0,
            "batch_size": 4,
            "uneven": "pad",
            "shuffle": True,
            "seed": 5,
            "epoch": 1,
        }
    )
    for p in plans:
        items = expand(p.workers[0].items)
        shards = {s[1] for s, _, pad in items if not pad}
        assert {s[1] for s, _, pad in items if pad} <= shards  # its own shards, over again


def test_too_few_shards_or_packed_sequences_are_refused() -> None:
    with pytest.raises(ConfigError, match="3 shards cannot serve 4 ranks"):
        plan_kw([5, 5, 5], rank=0, world_size=4, split="shards")
    with pytest.raises(ConfigError, match="split='shards' with uneven='drop' leaves a rank"):
        plan_kw([9, 1, 1], rank=0, world_size=3, split="shards", uneven="drop")
    with pytest.raises(ConfigError, match=r"split='bytes' is not one of 'samples', 'shards'"):
        plan_kw([5, 5], split="bytes")
