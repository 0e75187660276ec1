"""Resume on the plan, without I/O: samples are (shard, index) pairs, streams are simulated with
the loader's own ``worker_stream``/``read_items`` over an identity reader."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.plan import RankPlan, Segment, samples_per_rank
from loaders.read import worker_stream
from tests.support.plans import batch_sizes, plan_kw, resumed_kw, split


def _ids(run):
    return ((s.shard, i) for s in run for i in range(s.start, s.stop))


def delivered(plan: RankPlan, buffer: int) -> list[list[tuple[int, int]]]:
    """The batches a rank delivers for ``plan``, in DataLoader order (what the loader yields)."""
    per_worker = []
    for wp in plan.workers:
        out = list(worker_stream(wp, _ids, shuffle_buffer=buffer, batch_size=plan.batch_size))
        sizes = batch_sizes(plan, wp)[wp.first_batch(plan.batch_size) :]
        assert sum(sizes) == len(out), "a worker's stream and its batch sizes disagree"
        per_worker.append(split(out, sizes))
    order = plan.loader_order()  # what torch's round robin over the workers gives
    assert order == plan.batch_order()[plan.resume_at :]
    firsts = [wp.first_batch(plan.batch_size) for wp in plan.workers]
    return [per_worker[w][b - firsts[w]] for w, b in order]


topologies = st.fixed_dictionaries(
    {
        "world_size": st.integers(1, 4),
        "num_workers": st.integers(0, 3),
        "batch_size": st.integers(1, 9),
    }
)


@st.composite
def setups(draw):
    sizes = draw(st.lists(st.integers(0, 40), min_size=1, max_size=7).filter(lambda x: sum(x) > 4))
    return {
        "sizes": sizes,
        "seed": draw(st.integers(0, 3)),
        "epoch": draw(st.integers(0, 3)),
        "shuffle": draw(st.booleans()),
        "buffer": draw(st.sampled_from([0, 1, 2, 5, 16, 2000])),  # 2: the smallest shuffle
        "uneven": draw(st.sampled_from(["pad", "drop"])),
        "drop_last": draw(st.booleans()),
    }


def _fresh(setup, topo, rank) -> RankPlan:
    return plan_kw(
        setup["sizes"],
        seed=setup["seed"],
        epoch=setup["epoch"],
        rank=rank,
        shuffle=setup["shuffle"],
        uneven=setup["uneven"],
        drop_last=setup["drop_last"],
        **topo,
    )


def _resumed(setup, history, topo, rank) -> RankPlan:
    return resumed_kw(
        setup["sizes"],
        history,
        seed=setup["seed"],
        epoch=setup["epoch"],
        rank=rank,
        shuffle=setup["shuffle"],
        shuffle_buffer=setup["buffer"],
        uneven=setup["uneven"],
        drop_last=setup["drop_last"],
        **topo,
    )


def _valid(setup, topo) -> bool:
    return not (setup["uneven"] == "drop" and sum(setup["sizes"]) < topo["world_size"])


@settings(max_examples=150, deadline=None)
@given(setup=setups(), topo=topologies, k_frac=st.floats(0, 1))
def test_same_topology_resume_continues_exactly(setup, topo, k_frac) -> None:
    if not _valid(setup, topo):
        return
    for rank in range(topo["world_size"]):
        full = delivered(_fresh(setup, topo, rank), setup["buffer"])
        k = round(k_frac * len(full))
        seg = Segment(topo["world_size"], topo["num_workers"], topo["batch_size"], k)
        resumed = _resumed(setup, [seg], topo, rank)
        assert resumed.remaining_batches == len(full) - k
        assert delivered(resumed, setup["buffer"]) == full[k:]


@settings(max_examples=150, deadline=None)
@given(setup=setups(), old=topologies, new=topologies, k_frac=st.floats(0, 1))
def test_elastic_resume_delivers_the_rest_exactly_once(setup, old, new, k_frac) -> None:
    if not (_valid(setup, old) and setup["uneven"] == "pad"):
        return  # drop: resumed ranks may drop up to W-1 of the remaining samples (checked below)
    if old == new:
        return
    W = old["world_size"]
    fulls = [delivered(_fresh(setup, old, r), setup["buffer"]) for r in range(W)]
    k = round(k_frac * len(fulls[0]))
    before = Counter(s for f in fulls for b in f[:k] for s in b)
    epoch_all = Counter(s for f in fulls for b in f for s in b)
    history = [Segment(old["world_size"], old["num_workers"], old["batch_size"], k)]
    after: Counter = Counter()
    lengths = set()
    for r in range(new["world_size"]):
        plan = _resumed(setup, history, new, r)
        got = delivered(plan, setup["buffer"])
        lengths.add(len(got))
        after.update(s for b in got for s in b)
    assert len(lengths) == 1  # equal batch counts on every new rank
    remaining = epoch_all - before  # what the old run still owed (pad repeats included)
    # every owed sample is delivered (drop_last may leave out each new rank's final partial
    # batch); nothing already delivered comes again, except as padding of the new topology
    # (at most W'-1 repeats of owed samples)
    missing = sum((remaining - after).values())
    allowed = new["world_size"] * (new["batch_size"] - 1) if setup["drop_last"] else 0
    assert missing <= allowed
    extra = after - remaining
    assert sum(extra.values()) <= new["world_size"] - 1
    assert not (set(extra) & set(before) - set(remaining))


@settings(max_examples=60, deadline=None)
@given(
    setup=setups(), a=topologies, b=topologies, c=topologies, f1=st.floats(0, 1), f2=st.floats(0, 1)
)
def test_two_elastic_resumes_in_one_epoch(setup, a, b, c, f1, f2) -> None:
    setup = {**setup, "uneven": "pad", "drop_last": False}
    if a == b or b == c:
        return
    epoch_all = Counter(
        s
        for r in range(a["world_size"])
        for bt in delivered(_fresh(setup, a, r), setup["buffer"])
        for s in bt
    )
    k1 = round(f1 * len(delivered(_fresh(setup, a, 0), setup["buffer"])))
    h1 = [Segment(a["world_size"], a["num_workers"], a["batch_size"], k1)]
    seen: Counter = Counter()
    for r in range(a["world_size"]):
        seen.update(s for bt in delivered(_fresh(setup, a, r), setup["buffer"])[:k1] for s in bt)
    nb = len(delivered(_resumed(setup, h1, b, 0), setup["buffer"]))
    k2 = round(f2 * nb)
    for r in range(b["world_size"]):
        seen.update(
            s for bt in delivered(_resumed(setup, h1, b, r), setup["buffer"])[:k2] for s in bt
        )
    h2 = [*h1, Segment(b["world_size"], b["num_workers"], b["batch_size"], k2)]
    for r in range(c["world_size"]):
        seen.update(s for bt in delivered(_resumed(setup, h2, c, r), setup["buffer"]) for s in bt)
    # every sample of the epoch came; repeats only as padding (at most W-1 per topology)
    assert set(seen) == set(epoch_all)
    repeats = sum(seen.values()) - len(seen)
    assert repeats <= (a["world_size"] - 1) + (b["world_size"] - 1) + (c["world_size"] - 1)


def test_resume_at_90_percent_rereads_at_most_one_block() -> None:
    """What a same-topology resume re-reads: at most one shuffle block per worker."""
    sizes = [1000] * 20
    topo = {"world_size": 2, "num_workers": 2, "batch_size": 64}
    full = plan_kw(sizes, seed=0, epoch=0, rank=0, **topo)
    k = int(full.num_batches * 0.9)
    plan = resumed_kw(
        sizes,
        [Segment(2, 2, 64, k)],
        seed=0,
        epoch=0,
        rank=0,
        shuffle_buffer=2000,
        **topo,
    )
    read = Counter()

    def counting(run):
        for s in run:
            read[s.shard] += len(s)
        return _ids(run)

    for wp in plan.workers:
        list(worker_stream(wp, counting, shuffle_buffer=2000, batch_size=64))
        assert wp.skip > 0
    reread = sum(read.values()) - sum(wp.num_samples - wp.skip for wp in plan.workers)
    assert 0 <= reread <= 2 * 2000
    assert samples_per_rank(20_000, world_size=2) == full.num_samples
