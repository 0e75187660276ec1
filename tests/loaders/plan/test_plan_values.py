"""The epoch plan's small parts by value, where the property tests (test_plan.py and friends)
check relations: per-rank counts for each ``uneven``, which sample a padding slot repeats, the
topology checks and their messages, shuffle blocks and seeds, slicing of item lists."""

from __future__ import annotations

import numpy as np
import pytest

from loaders.plan.epoch import (
    Uneven,
    as_mixture,
    as_uneven,
    check_data,
    k_of,
    num_batches,
    rank_span,
    samples_per_rank,
)
from loaders.plan.epoch_spec import EpochSpec, Topology
from loaders.plan.items import Piece, Slice, as_pad, merge_slices, take_items
from loaders.plan.shuffle import (
    block_permutation,
    block_seed,
    first_block,
    shuffle_blocks,
    worker_seed,
)
from wdstool.base.errors import ConfigError


@pytest.mark.parametrize(
    ("n", "world", "pad", "drop"),
    [(10, 3, 4, 3), (9, 3, 3, 3), (2, 3, 1, 0), (0, 2, 0, 0), (7, 1, 7, 7)],
)
def test_samples_per_rank(n: int, world: int, pad: int, drop: int) -> None:
    assert samples_per_rank(n, world_size=world) == pad  # "pad" by default
    assert samples_per_rank(n, world_size=world, uneven="mask") == pad
    assert samples_per_rank(n, world_size=world, uneven=Uneven.DROP) == drop


def test_num_batches() -> None:
    assert num_batches(10, world_size=3, batch_size=3) == 2  # 4 per rank: 3 + 1
    assert num_batches(10, world_size=3, batch_size=3, drop_last=True) == 1
    assert num_batches(10, world_size=3, batch_size=3, uneven="drop") == 1  # 3 per rank
    assert num_batches(12, world_size=3, batch_size=2, drop_last=True) == 2
    assert num_batches(10, world_size=1, batch_size=5) == 2
    with pytest.raises(ConfigError) as info:
        num_batches(10, world_size=1, batch_size=5, uneven="even")
    assert info.value.message == "uneven='even' is not one of 'pad', 'drop', 'mask'"
    assert as_uneven("mask") is Uneven.MASK and as_uneven(Uneven.PAD) is Uneven.PAD


def _take(start: int, length: int) -> list[Slice]:
    return [Slice(0, start, start + length)] if length else []


@pytest.mark.parametrize(
    ("n", "rank", "world", "uneven", "items", "total", "real"),
    [
        # 10 over 3 ranks: 4, 3, 3 real; the short ranks repeat their own first sample
        (10, 0, 3, Uneven.PAD, [Slice(0, 0, 4)], 4, 4),
        (10, 1, 3, Uneven.PAD, [Slice(0, 4, 7), Slice(0, 4, 5, pad=True)], 4, 3),
        (10, 2, 3, Uneven.MASK, [Slice(0, 7, 10), Slice(0, 7, 8, pad=True)], 4, 3),
        (10, 1, 3, Uneven.DROP, [Slice(0, 4, 7)], 3, 3),
        (10, 0, 3, Uneven.DROP, [Slice(0, 0, 3)], 3, 3),  # cut to 3
        # 2 over 3 ranks: rank 2 has nothing of its own and repeats sample 2 % 2 = 0
        (2, 2, 3, Uneven.PAD, [Slice(0, 0, 1, pad=True)], 1, 0),
        (2, 1, 3, Uneven.PAD, [Slice(0, 1, 2)], 1, 1),
        (5, 4, 7, Uneven.MASK, [Slice(0, 4, 5)], 1, 1),
        (5, 6, 7, Uneven.MASK, [Slice(0, 1, 2, pad=True)], 1, 0),  # 6 % 5 = 1
    ],
)
def test_rank_span(n, rank, world, uneven, items, total, real) -> None:
    got = rank_span(n, Topology(rank, world), uneven, _take)
    assert got == (items, total, real)


def test_topology_checks() -> None:
    """Each rule in the value it belongs to (EpochSpec, Topology), the data's in check_data."""
    spec, topo = EpochSpec(batch_size=1), Topology(0, 2)
    check_data(5, spec, topo)
    check_data(2, EpochSpec(batch_size=1, uneven=Uneven.DROP, drop_last=True), topo)  # one each
    cases = [
        (lambda: Topology(0, 0), "world_size must be >= 1, got 0"),
        (lambda: Topology(2, 2), "rank 2 is outside 0..1"),
        (lambda: Topology(-1, 2), "rank -1 is outside 0..1"),
        (lambda: Topology(0, 2, -1), "num_workers must be >= 0, got -1"),
        (lambda: EpochSpec(batch_size=0), "batch_size must be >= 1, got 0"),
        (lambda: EpochSpec(epoch=-1), "seed and epoch must be >= 0, got seed=0, epoch=-1"),
        (lambda: EpochSpec(seed=-3), "seed and epoch must be >= 0, got seed=-3, epoch=0"),
    ]
    for build, message in cases:
        with pytest.raises(ConfigError) as info:
            build()
        assert info.value.message == message
    with pytest.raises(ConfigError) as info:
        check_data(1, EpochSpec(uneven=Uneven.DROP), topo)
    assert info.value.message == (
        "1 samples are fewer than 2 ranks: with uneven='drop' every rank would get nothing; "
        "use uneven='pad'"
    )
    with pytest.raises(ConfigError) as info:
        EpochSpec(uneven=Uneven.MASK, drop_last=True)
    assert info.value.message.startswith("uneven='mask' delivers every sample exactly once")
    assert (k_of(0), k_of(1), k_of(3)) == (1, 1, 3)


def test_shard_sizes_as_one_source() -> None:
    m = as_mixture([3, 0, 4])
    assert m.total == 7 and as_mixture(m) is m
    for bad, message in (
        ([3, -1], "shard sizes must be non-negative sample counts"),
        ([[1, 2]], "shard sizes must be non-negative sample counts"),
        ([0, 0], "the dataset has no samples"),
        ([], "the dataset has no samples"),
    ):
        with pytest.raises(ConfigError) as info:
            as_mixture(bad)
        assert info.value.message == message


def test_shuffle_blocks_double_up_to_the_buffer() -> None:
    assert shuffle_blocks(0, 8, 2) == [0] and shuffle_blocks(-1, 8, 2) == [0]
    assert shuffle_blocks(10, 1, 4) == [0, 10] and shuffle_blocks(10, 0, 4) == [0, 10]
    assert shuffle_blocks(30, 8, 2) == [0, 2, 6, 14, 22, 30]
    assert shuffle_blocks(5, 8, 20) == [0, 5]  # the first block is at most the buffer
    assert shuffle_blocks(5, 8, 0) == [0, 1, 3, 5]  # and at least one item
    assert shuffle_blocks(7, 2, 2) == [0, 2, 4, 6, 7]
    assert first_block(2000, 64) == 100 and first_block(2000, 256) == 256
    assert first_block(50, 64) == 50 and first_block(0, 64) == 1


def test_seeds_are_fixed_functions_of_their_inputs() -> None:
    s = worker_seed(7, 3, 1, 2)
    assert s == worker_seed(7, 3, 1, 2) and 0 <= s < 2**63
    others = {worker_seed(*a) for a in [(8, 3, 1, 2), (7, 4, 1, 2), (7, 3, 0, 2), (7, 3, 1, 3)]}
    assert s not in others and len(others) == 4
    assert worker_seed(7, 3, 1, 2, generation=0) == s != worker_seed(7, 3, 1, 2, generation=1)
    want = int(np.random.SeedSequence([7, 3, 1, 2, 0xB0FF]).generate_state(1, np.uint64)[0]) >> 1
    assert s == want  # pinned: a saved state resumes with the same seeds after an upgrade
    b = block_seed(s, 4)
    assert b == int(np.random.SeedSequence([s, 4, 0xB10C]).generate_state(1, np.uint64)[0]) >> 1
    assert b != block_seed(s, 5) and 0 <= b < 2**63
    p = block_permutation(b, 10)
    assert sorted(p.tolist()) == list(range(10)) and p.tolist() == block_permutation(b, 10).tolist()
    assert p.tolist() == np.random.Generator(np.random.PCG64(b)).permutation(10).tolist()


def test_item_lists() -> None:
    items = [Slice(0, 0, 4), Slice(1, 10, 13, rep=1), Slice(2, 5, 7, source=1)]
    assert take_items(items, 0, 9) == items
    assert take_items(items, 2, 4) == [Slice(0, 2, 4), Slice(1, 10, 12, rep=1)]
    assert take_items(items, 4, 3) == [Slice(1, 10, 13, rep=1)]
    assert take_items(items, 8, 5) == [Slice(2, 6, 7, source=1)]
    assert take_items(items, 3, 0) == [] and take_items([], 0, 3) == []
    assert as_pad(Slice(3, 1, 2, source=1, rep=2)) == Slice(3, 1, 2, 1, 2, True)
    parts = [Slice(0, 0, 2), Slice(0, 2, 5), Slice(0, 6, 7), Slice(1, 7, 8), Slice(1, 8, 9, rep=1)]
    assert merge_slices(parts) == (
        Slice(0, 0, 5), Slice(0, 6, 7), Slice(1, 7, 8), Slice(1, 8, 9, rep=1),
    )  # fmt: skip
    assert merge_slices([Slice(0, 0, 2), Slice(0, 2, 3, pad=True)]) == (
        Slice(0, 0, 2), Slice(0, 2, 3, pad=True),
    )  # fmt: skip
    assert merge_slices([Slice(0, 0, 2, source=0), Slice(0, 2, 3, source=1)])[1].source == 1
    assert len(Slice(4, 3, 9)) == 6 and Slice(4, 3, 9, 1, 2, True).cut(1, 3) == Slice(
        4, 4, 6, 1, 2, True
    )


def test_pieces_of_a_partly_delivered_block() -> None:
    base = (Slice(0, 0, 4), Slice(1, 0, 3))
    whole = Piece(base, 2, 5)
    assert whole.kept().tolist() == [2, 3, 4] and len(whole) == 3 and whole.base_len == 7
    padded = Piece(base, 0, 7, seed=9, exclude=2, pad=True)
    assert padded.cut(1, 3) == Piece(base, 1, 3, 9, 2, True)  # the padding flag is kept
    kept = padded.kept()
    gone = set(block_permutation(9, 7)[:2].tolist())
    assert sorted(kept.tolist()) == sorted(set(range(7)) - gone) and len(kept) == 5
