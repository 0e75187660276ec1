"""state_dict / load_state_dict on real loaders over real shards."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from loaders import make_loader
from wdstool.base.errors import ConfigError


def _loader(ds: Path, *, workers: int, shuffle: bool = True, rank=0, world=1, batch=4, **kw):
    return make_loader(
        ds,
        batch,
        image_size=16,
        num_workers=workers,
        shuffle=shuffle,
        shuffle_buffer=kw.pop("shuffle_buffer", 12),
        rank=rank,
        world_size=world,
        seed=11,
        **kw,
    )


def _epoch(loader, epoch: int) -> list[tuple[tuple[str, ...], torch.Tensor]]:
    loader.set_epoch(epoch)
    return [(tuple(b["keys"]), b["pixel_values"].clone()) for b in loader]


def _stop_after(loader, epoch: int, k: int) -> dict:
    loader.set_epoch(epoch)
    it = iter(loader)
    for _ in range(k):
        next(it)
    state = loader.state_dict()
    del it
    return json.loads(json.dumps(state))  # JSON round trip: nothing but plain data


@pytest.mark.parametrize("workers", [0, 1, 3])
@pytest.mark.parametrize("shuffle", [True, False])
def test_same_topology_resume_gives_the_uninterrupted_batches(
    learnable_dataset: Path, workers: int, shuffle: bool
) -> None:
    full = _epoch(_loader(learnable_dataset, workers=workers, shuffle=shuffle), 1)
    n = len(full)  # 120 samples / 4 = 30 batches; shards of 17 samples
    for k in (0, 4, 17 // 4 + 1, n - 1, n):
        state = _stop_after(_loader(learnable_dataset, workers=workers, shuffle=shuffle), 1, k)
        assert state["batches"] == k and state["epoch"] == 1
        fresh = _loader(learnable_dataset, workers=workers, shuffle=shuffle)
        fresh.load_state_dict(state)
        # len() counts the whole epoch, as an uninterrupted run does; a pass yields the rest
        assert (len(fresh), fresh.start_batch) == (n, k)
        rest = [(tuple(b["keys"]), b["pixel_values"].clone()) for b in fresh]
        assert len(rest) == n - k
        assert [r[0] for r in rest] == [f[0] for f in full[k:]], (k, workers)
        for (_, a), (_, b) in zip(rest, full[k:], strict=True):
            assert torch.equal(a, b)  # same augmentation draws too
    # after a resumed epoch, the next one is a normal one
    fresh.set_epoch(2)
    assert [k for k, _ in _epoch(fresh, 2)] == [
        k for k, _ in _epoch(_loader(learnable_dataset, workers=workers, shuffle=shuffle), 2)
    ]


def test_resume_then_checkpoint_again(learnable_dataset: Path) -> None:
    full = [k for k, _ in _epoch(_loader(learnable_dataset, workers=2), 0)]
    s1 = _stop_after(_loader(learnable_dataset, workers=2), 0, 7)
    second = _loader(learnable_dataset, workers=2)
    second.load_state_dict(s1)
    it = iter(second)
    got = [tuple(next(it)["keys"]) for _ in range(5)]
    s2 = second.state_dict()
    assert s2["batches"] == 12 and len(s2["segments"]) == 1
    third = _loader(learnable_dataset, workers=2)
    third.load_state_dict(s2)
    got += [tuple(b["keys"]) for b in third]
    assert got == full[7:]


def test_elastic_two_to_three_ranks_delivers_each_remaining_sample_once(
    learnable_dataset: Path,
) -> None:
    old = [_loader(learnable_dataset, workers=2, rank=r, world=2) for r in range(2)]
    full = [[k for k, _ in _epoch(ld, 0)] for ld in old]
    k = 6
    states = [
        _stop_after(_loader(learnable_dataset, workers=2, rank=r, world=2), 0, k) for r in range(2)
    ]
    before = Counter(s for f in full for b in f[:k] for s in b)
    owed = Counter(s for f in full for b in f for s in b) - before
    lengths, after = set(), Counter()
    for r in range(3):
        new = _loader(learnable_dataset, workers=1, rank=r, world=3, batch=5)
        new.load_state_dict(states[r % 2])  # every rank's state describes the same history
        batches = [b["keys"] for b in new]
        lengths.add(len(batches))
        # the epoch's batches on this rank: the k delivered before, then the new rank's share
        assert new.start_batch == k and len(batches) == len(new) - k
        after.update(s for b in batches for s in b)
    assert len(lengths) == 1
    assert not (owed - after)  # everything owed came
    extra = after - owed
    assert sum(extra.values()) <= 2 and not (set(extra) - set(owed))  # padding only
    # the next epoch is what a fresh 3-rank run gives
    nxt = _loader(learnable_dataset, workers=1, rank=1, world=3, batch=5)
    nxt.load_state_dict(states[1])
    nxt.set_epoch(1)
    ref = _loader(learnable_dataset, workers=1, rank=1, world=3, batch=5)
    ref.set_epoch(1)
    assert [b["keys"] for b in nxt] == [b["keys"] for b in ref]


def test_state_of_another_dataset_or_version_is_refused(
    learnable_dataset: Path, uneven_dataset: Path
) -> None:
    state = _stop_after(_loader(learnable_dataset, workers=0), 0, 3)
    other = _loader(uneven_dataset, workers=0)
    with pytest.raises(ConfigError, match="another data set"):
        other.load_state_dict(state)
    same = _loader(learnable_dataset, workers=0)
    with pytest.raises(ConfigError, match="version 99 is not supported"):
        same.load_state_dict({**state, "version": 99})
    with pytest.raises(ConfigError, match="seed=11; this loader has seed=12"):
        make_loader(learnable_dataset, 4, image_size=16, num_workers=0, seed=12).load_state_dict(
            state
        )
    with pytest.raises(ConfigError, match="not a wdstool loader state"):
        same.load_state_dict({"epoch": 3})


def test_state_survives_torch_save(learnable_dataset: Path) -> None:
    state = _stop_after(_loader(learnable_dataset, workers=0), 0, 3)
    buf = io.BytesIO()
    torch.save({"loader": state}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)["loader"]
    assert loaded == state


def test_load_state_after_persistent_workers_started(learnable_dataset: Path) -> None:
    loader = _loader(learnable_dataset, workers=2)
    full = [k for k, _ in _epoch(loader, 0)]  # workers are up now
    state = _stop_after(_loader(learnable_dataset, workers=2), 0, 10)
    loader.load_state_dict(state)
    assert [tuple(b["keys"]) for b in loader] == full[10:]
