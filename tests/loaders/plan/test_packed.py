"""The exact plan of packed batches (``loaders.plan.packed_epoch``), without I/O: samples are global
ids, a batch is its rows of (id, token offset, token count) entries; what a rank delivers is its
workers' batches in the plan's DataLoader order."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.plan import EpochSpec, MixSource, Mixture, Segment, Topology
from loaders.plan.packed_epoch import (
    PackedData,
    PackedRankPlan,
    PackSpec,
    empty_batch,
    plan_packed,
    plan_packed_resumed,
    unit_id,
)
from loaders.plan.packing import pack_sequences
from wdstool.base.errors import ConfigError


@st.composite
def setups(draw):
    """Shard sizes, every sample's length (some over L), the epoch and the packing."""
    sizes = draw(st.lists(st.integers(0, 25), min_size=1, max_size=5).filter(lambda s: sum(s)))
    capacity = draw(st.integers(2, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n = sum(sizes)
    over = rng.random(n) < draw(st.sampled_from([0.0, 0.1, 0.4]))
    lengths = np.where(
        over, rng.integers(capacity + 1, 3 * capacity + 1, n), rng.integers(1, capacity + 1, n)
    ).astype(draw(st.sampled_from([np.int32, np.int64])))
    spec = EpochSpec(
        seed=draw(st.integers(0, 3)), epoch=draw(st.integers(0, 2)), shuffle=draw(st.booleans())
    )
    pack = PackSpec(
        capacity=capacity,
        rows=draw(st.integers(1, 4)),
        window=draw(st.integers(1, 12)),
        method=draw(st.sampled_from(["best_fit", "first_fit", "best_fit_decreasing"])),
        open_sequences=draw(st.sampled_from([None, 1, 2, 4])),
        overflow=draw(st.sampled_from(["truncate", "split", "drop"])),
    )
    return sizes, lengths, spec, pack


topologies = st.tuples(st.integers(1, 4), st.integers(0, 3), st.integers(1, 4))  # W, workers, rows


def _plans(setup, world_size: int, workers: int) -> list[PackedRankPlan]:
    sizes, lengths, spec, pack = setup
    return [
        plan_packed(PackedData.of(sizes, lengths), spec, pack, Topology(r, world_size, workers))
        for r in range(world_size)
    ]


def _segment_plans(data, lengths, spec, pack, history, shape) -> list[PackedRankPlan]:
    """Every rank's plan of the next segment, on topology ``shape`` = (ranks, workers, rows)."""
    world_size, workers, rows = shape
    seg_pack = PackSpec(**{**pack.__dict__, "rows": rows})
    return [
        plan_packed_resumed(
            PackedData.of(data, lengths), history, spec, seg_pack, Topology(r, world_size, workers)
        )
        for r in range(world_size)
    ]


def _delivered(plan: PackedRankPlan) -> list:
    """The batches the rank delivers, in the loader's order (after what it skips)."""
    per_worker = [w.batches() for w in plan.workers]
    return [per_worker[w][b] for w, b in plan.loader_order()]


def _in_order(plan: PackedRankPlan, batches: int) -> list:
    """The first ``batches`` batches of the plan, in its order from the start."""
    per_worker = [w.batches() for w in plan.workers]
    return [per_worker[w][b] for w, b in plan.batch_order()[:batches]]


def _check_batches(plan: PackedRankPlan, batches) -> None:
    for batch in batches:
        assert len(batch) == plan.rows
        for row in batch:
            assert sum(t for _, _, t in row) <= plan.capacity
            assert all(t >= 1 for _, _, t in row)


def _check_cover(entries, lengths: np.ndarray, pack: PackSpec) -> None:
    """Every sample's tokens exactly once: all of them (pieces together under "split"), its
    first ``capacity`` under "truncate", none of an over-long one under "drop"."""
    got = defaultdict(list)
    for i, off, tok in entries:
        got[i].append((off, tok))
    for i, n in enumerate(lengths.tolist()):
        want = n if n <= pack.capacity or pack.overflow == "split" else pack.capacity
        if n > pack.capacity and pack.overflow == "drop":
            want = 0
        spans = sorted(got.pop(i, []))
        pos = 0
        for off, tok in spans:
            assert off == pos, f"sample {i}: tokens from {off}, expected {pos}"
            pos += tok
        assert pos == want, f"sample {i}: {pos} tokens delivered, expected {want}"
    assert not got


def _over(lengths: np.ndarray, pack: PackSpec) -> Counter:
    """The samples "drop" leaves out, once each."""
    if pack.overflow != "drop":
        return Counter()
    return Counter(np.flatnonzero(lengths > pack.capacity).tolist())


@settings(max_examples=60, deadline=None)
@given(setup=setups(), world_size=st.integers(1, 4), k1=st.integers(0, 3), k2=st.integers(0, 3))
def test_fresh_epoch_every_token_once_equal_steps_any_workers(setup, world_size, k1, k2) -> None:
    sizes, lengths, spec, pack = setup
    plans = _plans(setup, world_size, k1)
    assert len({p.num_batches for p in plans}) == 1  # equal steps on every rank
    entries, dropped, shares = [], Counter(), []
    for plan in plans:
        order = plan.loader_order()
        assert order == plan.batch_order()
        assert sorted(order) == [(w.worker, b) for w in plan.workers for b in range(w.num_batches)]
        assert len(order) == plan.num_batches
        got = _delivered(plan)
        _check_batches(plan, got)
        entries += [e for batch in got for row in batch for e in row]
        windows = list(plan.windows)
        assert [win.index for win in windows] == list(range(len(windows)))
        # the rank's batches in plan order (its windows', then padding), dealt a batch at a
        # time: batch i made by worker i % k, delivered i-th
        real_batches = [b for win in windows for b in win.batches]
        assert got[: len(real_batches)] == real_batches
        assert [w for w, _b in order] == [i % max(1, k1) for i in range(len(order))]
        for g, win in enumerate(windows):
            assert len(win.ids) == pack.window or g == len(windows) - 1
            assert all(len(win.batches[j][-1]) for j in range(len(win.batches) - 1))
            dropped.update(win.dropped)
        shares.append([i for win in windows for i in win.ids])
        real = sum(w.real_batches for w in plan.workers)
        pads = [b for b in got if b == empty_batch(plan.rows)]
        assert len(pads) >= plan.num_batches - real  # padding batches: all-empty rows
    _check_cover(entries, lengths, pack)
    assert dropped == _over(lengths, pack)
    # contiguous near-equal shares of the epoch's order, every sample once
    assert sorted(i for s in shares for i in s) == list(range(sum(sizes)))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    if not spec.shuffle:
        assert [i for s in shares for i in s] == list(range(sum(sizes)))
    # another worker count: the same batches in the same order
    for plan, other in zip(plans, _plans(setup, world_size, k2), strict=True):
        assert other.num_batches == plan.num_batches
        assert _delivered(other) == _delivered(plan)
    assert _plans(setup, world_size, k1) == plans  # deterministic


@settings(max_examples=40, deadline=None)
@given(setup=setups(), world_size=st.integers(1, 4), k=st.integers(0, 3))
def test_no_shuffle_packs_each_window_in_read_order(setup, world_size, k) -> None:
    sizes, lengths, spec, pack = setup
    spec = EpochSpec(seed=spec.seed, epoch=spec.epoch, shuffle=False)
    for plan in _plans((sizes, lengths, spec, pack), world_size, k):
        for win in plan.windows:
            assert list(win.ids) == sorted(win.ids)
            p = pack_sequences(
                lengths[list(win.ids)],
                pack.capacity,
                method=pack.method,
                window=None if pack.method == "best_fit_decreasing" else pack.open_sequences,
                overflow=pack.overflow,
            )
            rows = [tuple((win.ids[i], off, tok) for i, off, tok in seq) for seq in p.sequences()]
            assert [r for b in win.batches for r in b if r] == rows


@settings(max_examples=30, deadline=None)
@given(setup=setups(), topo=topologies, at=st.lists(st.floats(0, 1), max_size=3))
def test_same_topology_resume_gives_the_uninterrupted_rest(setup, topo, at) -> None:
    sizes, lengths, spec, pack = setup
    world_size, workers, rows = topo
    pack = PackSpec(**{**pack.__dict__, "rows": rows})
    for rank in range(world_size):
        t_rank = Topology(rank, world_size, workers)
        full = plan_packed(PackedData.of(sizes, lengths), spec, pack, t_rank)
        whole = _delivered(full)
        for t in range(full.num_batches + 1):  # the loader's order from every point
            skips = full.delivered(t)
            skipped = tuple(replace(w, skip=s) for w, s in zip(full.workers, skips, strict=True))
            at_t = replace(full, workers=skipped, resume_at=t)
            assert at_t.loader_order() == full.batch_order()[t:]
        for t in sorted({0, full.num_batches, *(round(f * full.num_batches) for f in at)}):
            seg = Segment(world_size, workers, rows, t)
            resumed = plan_packed_resumed(PackedData.of(sizes, lengths), [seg], spec, pack, t_rank)
            assert resumed.resume_at == t and resumed.remaining_batches == len(whole) - t
            assert resumed.loader_order() == full.batch_order()[t:]
            assert _delivered(resumed) == whole[t:]


def _shape(seg: Segment) -> tuple[int, int, int]:
    return seg.world_size, seg.num_workers, seg.batch_size


def _started_dropped(plan: PackedRankPlan, batches: int) -> Counter:
    """The dropped samples of the windows a batch of which was delivered (the documented rule:
    a window counts as started once a batch at or after its first was delivered: the rank
    delivers its windows' batches in order)."""
    out: Counter = Counter()
    first = 0
    for win in plan.windows:
        if batches > first:
            out.update(win.dropped)
        first += len(win.batches)
    return out


@settings(max_examples=80, deadline=None)
@given(
    setup=setups(),
    segments=st.lists(st.tuples(topologies, st.floats(0, 1)), min_size=1, max_size=2),
    final=topologies,
    again=st.booleans(),
)
def test_elastic_resume_delivers_every_remaining_token_once(setup, segments, final, again) -> None:
    """One or two segments, each delivering some batches, then the rest on another topology
    (or, ``again``, on the last one's: a continuation): every token of the epoch once."""
    sizes, lengths, spec, pack = setup
    history: list[Segment] = []
    entries, started = [], []  # started: each segment's dropped samples it counted
    for (world_size, workers, rows), frac in segments:
        if history and (world_size, workers, rows) == _shape(history[-1]):
            return  # the state merges a same-topology continuation into its segment
        plans = _segment_plans(sizes, lengths, spec, pack, history, (world_size, workers, rows))
        assert len({p.num_batches for p in plans}) == 1
        assert {p.generation for p in plans} == {len(history)}
        t = round(frac * plans[0].num_batches)
        started.append(Counter())
        for plan in plans:
            got = _in_order(plan, t)
            _check_batches(plan, got)
            entries += [e for batch in got for row in batch for e in row]
            started[-1] += _started_dropped(plan, t)
        history.append(Segment(world_size, workers, rows, t))
    world_size, workers, rows = _shape(history[-1]) if again else final
    final_pack = PackSpec(**{**pack.__dict__, "rows": rows})
    plans = [
        plan_packed_resumed(
            PackedData.of(sizes, lengths),
            history,
            spec,
            final_pack,
            Topology(r, world_size, workers),
        )
        for r in range(world_size)
    ]
    assert len({p.num_batches for p in plans}) == 1  # equal steps
    same = (world_size, workers, rows) == _shape(history[-1])
    generation = len(history) - 1 if same else len(history)
    assert {p.generation for p in plans} == {generation}
    dropped = sum(started[:generation], Counter())  # a continuation counts its segment's all
    for plan in plans:
        got = _delivered(plan)
        _check_batches(plan, got)
        entries += [e for batch in got for row in batch for e in row]
        dropped += Counter(i for win in plan.windows for i in win.dropped)
    _check_cover(entries, lengths, pack)
    assert dropped == _over(lengths, pack)


def test_bad_inputs_are_one_line_config_errors() -> None:
    spec, topo = EpochSpec(), Topology()
    pack = PackSpec(capacity=8, rows=2)
    lengths = np.array([3, 9, 2, 5])
    with pytest.raises(ConfigError, match=r"per sample of the 2 sources, in order \(7\)"):
        plan_packed(
            PackedData.of(Mixture((MixSource((2, 2)), MixSource((3,)))), lengths), spec, pack, topo
        )
    with pytest.raises(ConfigError, match="one integer token count per sample"):
        plan_packed(PackedData.of([2, 3], lengths), spec, pack, topo)
    with pytest.raises(ConfigError, match=r"lengths\[2\]=0"):
        plan_packed(PackedData.of([4], np.array([3, 9, 0, 5])), spec, pack, topo)
    with pytest.raises(ConfigError, match="rows"):
        PackSpec(capacity=8, rows=0)
    with pytest.raises(ConfigError, match="overflow"):
        PackSpec(capacity=8, rows=2, overflow="wrap")
    full = plan_packed(PackedData.of([4], lengths), spec, pack, topo)
    with pytest.raises(ConfigError, match="batches were delivered"):
        plan_packed_resumed(
            PackedData.of([4], lengths), [Segment(1, 0, 2, full.num_batches + 1)], spec, pack, topo
        )


# --- mixtures: units are (sample, rep), the sources' samples one after another ---------------


@st.composite
def mix_setups(draw):
    """2-3 sources (shard sizes, a weight each; some read more than once an epoch, some
    subsampled), every sample's length (some over L), the epoch and the packing."""
    n_sources = draw(st.integers(2, 3))
    sources = tuple(
        MixSource(
            tuple(draw(st.lists(st.integers(0, 9), min_size=1, max_size=3).filter(sum))),
            draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])),
            key=i,
        )
        for i in range(n_sources)
    )
    mix = Mixture(sources, start_epoch=0, cursors=tuple(draw(st.integers(0, 7)) for _ in sources))
    _sizes, lengths, spec, pack = draw(setups())
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n, capacity = mix.num_samples, pack.capacity
    over = rng.random(n) < draw(st.sampled_from([0.0, 0.1, 0.4]))
    lengths = np.where(
        over, rng.integers(capacity + 1, 3 * capacity + 1, n), rng.integers(1, capacity + 1, n)
    )
    return mix, lengths, spec, pack


def _read_order(mix: Mixture, spec: EpochSpec, topo: Topology) -> list[tuple[int, int]]:
    """(global sample id, rep) of a rank's real samples as the image mixture plan
    (``plan_epoch``, uneven="mask") has a reader read them: ``loaders.read.read_items``."""
    from loaders.plan import plan_epoch
    from loaders.read import read_items

    starts, at = [], 0
    for src in mix.sources:
        starts.append(at + np.concatenate([[0], np.cumsum(src.sizes)]))
        at += src.num_samples
    image_spec = EpochSpec(
        seed=spec.seed, epoch=spec.epoch, shuffle=spec.shuffle, batch_size=1, uneven="mask"
    )
    (worker,) = plan_epoch(mix, image_spec, replace(topo, num_workers=0)).workers

    def read_run(run):
        for s in run:
            for i in range(s.start, s.stop):
                yield (int(starts[s.source][s.shard]) + i, s.rep, s.pad)

    return [(g, rep) for g, rep, pad in read_items(list(worker.items), read_run) if not pad]


def _unit_lengths(mix: Mixture, lengths: np.ndarray, units) -> dict[int, int]:
    return {unit_id(g, rep, mix.num_samples): int(lengths[g]) for g, rep in units}


def _check_unit_cover(entries, want: dict[int, int], pack: PackSpec) -> None:
    """Every planned unit's tokens exactly once (as :func:`_check_cover` for samples)."""
    got = defaultdict(list)
    for u, off, tok in entries:
        got[u].append((off, tok))
    for u, n in want.items():
        expect = n if n <= pack.capacity or pack.overflow == "split" else pack.capacity
        if n > pack.capacity and pack.overflow == "drop":
            expect = 0
        pos = 0
        for off, tok in sorted(got.pop(u, [])):
            assert off == pos, f"unit {u}: tokens from {off}, expected {pos}"
            pos += tok
        assert pos == expect, f"unit {u}: {pos} tokens delivered, expected {expect}"
    assert not got, f"units delivered but not planned: {sorted(got)[:5]}"


def _over_units(want: dict[int, int], pack: PackSpec) -> Counter:
    if pack.overflow != "drop":
        return Counter()
    return Counter(u for u, n in want.items() if n > pack.capacity)


@settings(max_examples=60, deadline=None)
@given(setup=mix_setups(), world_size=st.integers(1, 4), k1=st.integers(0, 3), k2=st.integers(0, 3))
def test_mixture_every_unit_once_in_the_mixture_plans_shares(setup, world_size, k1, k2) -> None:
    """Each rank packs its items of the mixture epoch, read as the image plan reads them;
    every (sample, rep) once over the ranks, each source's count its share, every sample of a
    source ⌊share/size⌋ or ⌈share/size⌉ times with reps 0, 1, ...; rows within L, equal steps,
    the same batches for any worker count."""
    mix, lengths, spec, pack = setup
    plans = _plans(setup, world_size, k1)
    assert len({p.num_batches for p in plans}) == 1
    planned, entries, dropped = [], [], Counter()
    for rank, plan in enumerate(plans):
        got = _delivered(plan)
        _check_batches(plan, got)
        entries += [e for batch in got for row in batch for e in row]
        windows = plan.windows
        order = _read_order(mix, spec, Topology(rank, world_size))
        assert [i for win in windows for i in win.ids] == [
            unit_id(g, rep, mix.num_samples) for g, rep in order
        ]  # the rank's share: its items of the mixture epoch, in read order
        planned += order
        dropped.update(i for win in windows for i in win.dropped)
    assert len(set(planned)) == len(planned)
    ends = np.cumsum([0] + [s.num_samples for s in mix.sources])
    source_of = np.searchsorted(ends, [g for g, _ in planned], side="right") - 1
    assert np.bincount(source_of, minlength=len(ends) - 1).tolist() == mix.shares()
    reps = defaultdict(list)
    for g, rep in planned:
        reps[g].append(rep)
    for i, (share, src) in enumerate(zip(mix.shares(), mix.sources, strict=True)):
        q, extra = divmod(share, src.num_samples)
        counts = [len(reps[g]) for g in range(ends[i], ends[i + 1])]
        assert sorted(counts) == [q] * (src.num_samples - extra) + [q + 1] * extra
        assert all(
            sorted(reps[g]) == list(range(len(reps[g]))) for g in range(ends[i], ends[i + 1])
        )
    want = _unit_lengths(mix, lengths, planned)
    _check_unit_cover(entries, want, pack)
    assert dropped == _over_units(want, pack)
    for plan, other in zip(plans, _plans(setup, world_size, k2), strict=True):
        assert other.num_batches == plan.num_batches
        assert Counter(_delivered(other)) == Counter(_delivered(plan))
    assert _plans(setup, world_size, k1) == plans


@settings(max_examples=25, deadline=None)
@given(setup=mix_setups(), topo=topologies, at=st.lists(st.floats(0, 1), max_size=3))
def test_mixture_same_topology_resume_gives_the_uninterrupted_rest(setup, topo, at) -> None:
    mix, lengths, spec, pack = setup
    world_size, workers, rows = topo
    pack = PackSpec(**{**pack.__dict__, "rows": rows})
    for rank in range(world_size):
        t_rank = Topology(rank, world_size, workers)
        full = plan_packed(PackedData.of(mix, lengths), spec, pack, t_rank)
        whole = _delivered(full)
        for t in sorted({0, full.num_batches, *(round(f * full.num_batches) for f in at)}):
            seg = Segment(world_size, workers, rows, t)
            resumed = plan_packed_resumed(PackedData.of(mix, lengths), [seg], spec, pack, t_rank)
            assert resumed.resume_at == t and resumed.remaining_batches == len(whole) - t
            assert _delivered(resumed) == whole[t:]


@settings(max_examples=60, deadline=None)
@given(
    setup=mix_setups(),
    segments=st.lists(st.tuples(topologies, st.floats(0, 1)), min_size=1, max_size=2),
    final=topologies,
)
def test_mixture_elastic_resume_delivers_every_remaining_token_once(setup, segments, final) -> None:
    """Segments on other topologies, then the rest: every planned unit's tokens once, each
    dropped unit counted once, equal steps in every segment."""
    mix, lengths, spec, pack = setup
    history: list[Segment] = []
    entries, counted = [], Counter()
    steps = [*segments, (final, None)]  # the last one runs to the end of the epoch
    for (world_size, workers, rows), frac in steps:
        if history and (world_size, workers, rows) == _shape(history[-1]):
            return  # the state merges a same-topology continuation into its segment
        plans = _segment_plans(mix, lengths, spec, pack, history, (world_size, workers, rows))
        assert len({p.num_batches for p in plans}) == 1
        t = plans[0].num_batches if frac is None else round(frac * plans[0].num_batches)
        for plan in plans:
            got = _in_order(plan, t)
            _check_batches(plan, got)
            entries += [e for batch in got for row in batch for e in row]
            if frac is None:  # the epoch's end: every window of it counted
                counted += Counter(i for win in plan.windows for i in win.dropped)
            else:
                counted += _started_dropped(plan, t)
        history.append(Segment(world_size, workers, rows, t))
    planned = [
        u
        for r in range(history[0].world_size)
        for u in _read_order(mix, spec, Topology(r, history[0].world_size))
    ]
    want = _unit_lengths(mix, lengths, planned)
    _check_unit_cover(entries, want, pack)
    assert counted == _over_units(want, pack)


def test_best_fit_decreasing_rows_come_in_a_seeded_order() -> None:
    """Sorted, a window's sequences open longest sample first: a shuffled epoch puts them in a
    seeded order (a batch is not the window's longest samples); unshuffled, they stay sorted."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 100, 400)
    pack = PackSpec(capacity=100, rows=1, window=400, method="best_fit_decreasing")

    def longest_per_row(shuffle: bool, seed: int) -> list[int]:
        spec = EpochSpec(seed=seed, epoch=0, shuffle=shuffle)
        (win,) = plan_packed(PackedData.of([400], lengths), spec, pack, Topology(0, 1, 0)).windows
        return [max(int(lengths[sid]) for sid, _, _ in row) for (row,) in win.batches]

    assert longest_per_row(False, 0) == sorted(longest_per_row(False, 0), reverse=True)
    a, b = longest_per_row(True, 0), longest_per_row(True, 1)
    assert a != sorted(a, reverse=True) and b != sorted(b, reverse=True) and a != b
    assert sorted(a) == sorted(b)  # the same kind of rows, in another order


@settings(max_examples=40, deadline=None)
@given(setup=setups(), k=st.integers(2, 4))
def test_every_worker_has_batches_however_few_the_windows(setup, k) -> None:
    """One window can feed every worker: a rank with b batches gives each of its k workers
    b // k or b // k + 1 of them (window g went whole to worker g % k: with one window, one
    worker worked and the others idled)."""
    sizes, lengths, spec, pack = setup
    pack = PackSpec(**{**pack.__dict__, "window": 10**6})  # one window a rank
    (plan,) = [plan_packed(PackedData.of(sizes, lengths), spec, pack, Topology(0, 1, k))]
    counts = [w.num_batches for w in plan.workers]
    assert len(plan.windows) <= 1
    assert max(counts) - min(counts) <= 1 and sum(counts) == plan.num_batches
