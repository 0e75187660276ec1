"""What training frameworks look for on a loader: torchdata's ``Stateful`` protocol (which
Lightning's ``_Stateful`` copies), ``sampler.set_epoch`` (what Lightning calls every epoch), a
whole-epoch ``len()`` after a resume, and a topology that still matches torch.distributed."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch.distributed as dist

from loaders import StreamingLoader, make_loader
from wdstool.base.errors import ConfigError


def _loader(ds: Path, **kw) -> StreamingLoader:
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 1)
    return make_loader(ds, 8, image_size=16, num_workers=0, seed=3, **kw)


def _keys(loader) -> list[tuple[str, ...]]:
    return [tuple(b["keys"]) for b in loader]


def test_the_loader_is_torchdata_stateful(learnable_dataset: Path) -> None:
    """torchdata's runtime-checkable protocol (torchdata 0.11 installs with torch 2.14 as it
    is; the dev extra installs it: tests/test_extras.py fails without it), and the same shape
    checked by hand."""
    from torchdata.stateful_dataloader import Stateful

    loader = _loader(learnable_dataset)
    assert isinstance(loader, Stateful)
    assert list(inspect.signature(loader.state_dict).parameters) == []
    assert list(inspect.signature(loader.load_state_dict).parameters) == ["state"]


def test_state_before_iterating_and_between_batches(learnable_dataset: Path) -> None:
    """state_dict() before the first batch resumes at batch 0; between batches, at the next."""
    full = _keys(_loader(learnable_dataset))
    before = _loader(learnable_dataset)
    state0 = json.loads(json.dumps(before.state_dict()))
    assert (state0["epoch"], state0["batches"]) == (0, 0)
    again = _loader(learnable_dataset)
    again.load_state_dict(state0)
    assert (len(again), again.start_batch) == (len(full), 0)
    assert _keys(again) == full
    it = iter(before)
    states = []
    for _ in range(3):
        next(it)
        states.append(before.state_dict())
    assert [s["batches"] for s in states] == [1, 2, 3]
    later = _loader(learnable_dataset)
    later.load_state_dict(states[1])
    assert later.start_batch == 2 and len(later) == len(full)
    assert _keys(later) == full[2:]
    # a state taken right after loading one is the loaded one
    assert later.state_dict()["batches"] == len(full)
    fresh = _loader(learnable_dataset)
    fresh.load_state_dict(states[1])
    assert fresh.state_dict() == states[1]


def test_sampler_set_epoch_reshuffles_the_loader(learnable_dataset: Path) -> None:
    """Lightning's _set_sampler_epoch calls ``dataloader.sampler.set_epoch(epoch)``."""
    loader = _loader(learnable_dataset)
    first = _keys(loader)
    set_epoch = getattr(getattr(loader, "sampler", None), "set_epoch", None)
    assert callable(set_epoch)
    set_epoch(1)
    assert loader.epoch == 1
    second = _keys(loader)
    assert second != first
    ref = _loader(learnable_dataset)
    ref.set_epoch(1)
    assert _keys(ref) == second


def test_a_loader_made_before_the_process_group_is_refused_once_it_runs(
    learnable_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning's launcher sets WORLD_SIZE but not RANK; a loader detected from the
    environment before init_process_group disagrees with the process group: a clear error when
    it is iterated, never another rank's share. Explicit rank/world_size are left alone."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    early = make_loader(learnable_dataset, 8, image_size=16, num_workers=0)
    assert (early.topology.rank, early.topology.world_size) == (1, 2)
    monkeypatch.delenv("RANK")
    with pytest.raises(ConfigError, match=r"set both .* under Lightning"):
        make_loader(learnable_dataset, 8, image_size=16, num_workers=0)
    monkeypatch.delenv("WORLD_SIZE")
    explicit = make_loader(learnable_dataset, 8, image_size=16, num_workers=0, rank=1, world_size=2)
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        with pytest.raises(ConfigError, match=r"made for rank 1 of 2, but torch.distributed runs"):
            next(iter(early))
        assert len(_keys(explicit)) == len(explicit)
        late = make_loader(learnable_dataset, 8, image_size=16, num_workers=0)
        assert (late.topology.rank, late.topology.world_size) == (0, 1)
        assert len(_keys(late)) == len(late)
    finally:
        dist.destroy_process_group()
