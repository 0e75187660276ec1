"""The loader's saved state by value (every field), the segments it keeps across resumes, the
version-1 states it still reads, and the one-line error for each state it refuses."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from loaders import Source, make_loader
from wdstool.base.errors import ConfigError


def _loader(ds: Path, **kw):
    args = dict(image_size=16, num_workers=0, seed=11, shuffle_buffer=8)
    args.update(kw)
    return make_loader(ds, kw.pop("batch_size", 4), **args)


def _keys(loader) -> list[tuple[str, ...]]:
    return [tuple(b["keys"]) for b in loader]


def _stop_after(loader, k: int, epoch: int = 0) -> dict:
    loader.set_epoch(epoch)
    it = iter(loader)
    for _ in range(k):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    del it
    return state


@pytest.fixture(scope="module")
def state(uneven_dataset: Path) -> dict:
    return _stop_after(_loader(uneven_dataset), 2, epoch=1)


def test_every_field(uneven_dataset: Path, state: dict) -> None:
    identity = _loader(uneven_dataset).dataset.sources[0].index.identity
    assert len(identity) == 64
    assert state == {
        "format": "wdstool.loader-state",
        "version": 2,
        "dataset": identity,
        "num_samples": 23,
        "epoch": 1,
        "rank": 0,
        "batches": 2,
        "seed": 11,
        "shuffle": True,
        "shuffle_buffer": 8,
        "uneven": "pad",
        "drop_last": False,
        "segments": [{"world_size": 1, "num_workers": 0, "batch_size": 4, "batches": 2}],
        "mixture": {
            "epoch_size": None,
            "repeats": 1,
            "sources": [
                {
                    "identity": identity,
                    "url": str(uneven_dataset),
                    "weight": 1.0,
                    "num_samples": 23,
                    "cursor": 23,  # at epoch 1: one whole walk through the source done
                }
            ],
        },
    }


def test_segments_grow_on_the_same_topology_and_append_on_another(
    uneven_dataset: Path, state: dict
) -> None:
    same = _loader(uneven_dataset)
    same.load_state_dict(state)
    again = json.loads(json.dumps(_resumed_state(same, 1)))
    assert again["batches"] == 3 and again["epoch"] == 1
    assert again["segments"] == [{"world_size": 1, "num_workers": 0, "batch_size": 4, "batches": 3}]
    other = _loader(uneven_dataset, num_workers=1)
    other.load_state_dict(state)
    moved = _resumed_state(other, 1)
    assert moved["segments"] == [
        {"world_size": 1, "num_workers": 0, "batch_size": 4, "batches": 2},
        {"world_size": 1, "num_workers": 1, "batch_size": 4, "batches": 1},
    ]
    assert moved["batches"] == 1
    third = _loader(uneven_dataset, num_workers=1)
    third.load_state_dict(moved)
    assert _resumed_state(third, 1)["segments"][-1]["batches"] == 2  # merged again


def _resumed_state(loader, k: int) -> dict:
    it = iter(loader)
    for _ in range(k):
        next(it)
    state = loader.state_dict()
    del it
    return state


def test_a_version_1_state_resumes_as_version_2_does(uneven_dataset: Path, state: dict) -> None:
    v1 = {k: v for k, v in state.items() if k != "mixture"}
    v1["version"] = 1
    a, b = _loader(uneven_dataset), _loader(uneven_dataset)
    a.load_state_dict(state)
    b.load_state_dict(v1)
    assert a.start_batch == b.start_batch == 2
    assert _keys(a) == _keys(b) and len(_keys(_loader(uneven_dataset))) == 6


@pytest.mark.parametrize(
    ("key", "value", "mine"),
    [
        ("seed", 12, 11),
        ("shuffle", False, True),
        ("shuffle_buffer", 9, 8),
        ("uneven", "drop", "'pad'"),
        ("drop_last", True, False),
    ],
)
def test_settings_that_must_match(uneven_dataset: Path, state: dict, key, value, mine) -> None:
    with pytest.raises(ConfigError) as info:
        _loader(uneven_dataset).load_state_dict({**state, key: value})
    assert info.value.message == (
        f"the loader state was saved with {key}={value!r}; this loader has {key}={mine} "
        "(they must match to resume)"
    )


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (lambda s: s.pop("epoch"), "malformed loader state: KeyError('epoch')"),
        (lambda s: s.update(epoch="x"), "malformed loader state: ValueError("),
        (lambda s: s.pop("segments"), "malformed loader state: KeyError('segments')"),
        (lambda s: s["segments"][0].pop("batches"), "malformed loader state: KeyError('batches')"),
        (lambda s: s.update(segments=[]), "malformed loader state: no segments or no sources"),
        (lambda s: s.update(epoch=-1), "malformed loader state: no segments or no sources"),
        (lambda s: s["mixture"].update(sources=[]), "malformed loader state: no segments or no"),
        (lambda s: s["mixture"]["sources"][0].update(weight=0), "malformed loader state: ValueError('weight 0.0')"),
        (lambda s: s["mixture"]["sources"][0].update(weight=-2), "malformed loader state: ValueError('weight -2.0')"),
        (lambda s: s["mixture"]["sources"][0].update(cursor="c"), "malformed loader state: Val"),
        (lambda s: s["mixture"].update(epoch_size="n"), "malformed loader state: ValueError("),
        (lambda s: s.update(mixture=[]), "malformed loader state: TypeError("),
        (lambda s: s.update(version=3), "loader state version 3 is not supported (this wdstool "
                                        "reads versions 1, 2)"),
        (lambda s: s.update(version=None), "loader state version None is not supported"),
        (lambda s: s.update(format="x"), "not a wdstool loader state (missing 'format')"),
    ],
)  # fmt: skip
def test_malformed_states_are_refused(uneven_dataset: Path, state: dict, edit, error) -> None:
    bad = copy.deepcopy(state)
    edit(bad)
    loader = _loader(uneven_dataset)
    with pytest.raises(ConfigError) as info:
        loader.load_state_dict(bad)
    assert info.value.message.startswith(error)
    assert loader.start_batch == 0  # nothing half-applied


def test_not_a_dict_is_refused(uneven_dataset: Path) -> None:
    with pytest.raises(ConfigError, match=r"^not a wdstool loader state \(missing 'format'\)$"):
        _loader(uneven_dataset).load_state_dict([1, 2])  # type: ignore[arg-type]


def test_another_data_set_is_named(
    uneven_dataset: Path, learnable_dataset: Path, state: dict
) -> None:
    other = _loader(learnable_dataset)
    with pytest.raises(ConfigError) as info:
        other.load_state_dict(state)
    assert info.value.message == (
        f"the loader state belongs to another data set: its epoch 1 still needs "
        f"{uneven_dataset} (source 0 of the saved mixture), which this loader does not read; "
        "add it back to finish that epoch, or start a fresh epoch without the state"
    )
    no_url = copy.deepcopy(state)
    del no_url["mixture"]["sources"][0]["url"]  # the field is optional
    with pytest.raises(ConfigError) as info:
        other.load_state_dict(no_url)
    assert f"still needs identity {state['dataset'][:12]}... (source 0" in info.value.message


def _mixed(uneven: Path, learnable: Path, *, weights=(3.0, 1.0), extra: bool = True):
    sources = [Source(uneven, weight=weights[0]), Source(learnable, weight=weights[1])]
    return make_loader(
        sources if extra else sources[:1], 4, image_size=16, num_workers=0, seed=11,
        shuffle_buffer=8, epoch_size=20,
    )  # fmt: skip


def test_a_mixture_state_and_its_resume(uneven_dataset: Path, learnable_dataset: Path) -> None:
    """Shares 15 + 5 of a 20-sample epoch (weights 3:1): at epoch 1 each source's cursor has
    walked one share; resuming continues exactly, in this epoch and the next."""
    state = _stop_after(_mixed(uneven_dataset, learnable_dataset), 2, epoch=1)
    a, b = (
        _loader(d).dataset.sources[0].index.identity for d in (uneven_dataset, learnable_dataset)
    )
    assert state["num_samples"] == 20 and state["dataset"] == a
    assert state["mixture"] == {
        "epoch_size": 20,
        "repeats": 1,
        "sources": [
            {"identity": a, "url": str(uneven_dataset), "weight": 3.0, "num_samples": 23, "cursor": 15},
            {"identity": b, "url": str(learnable_dataset), "weight": 1.0, "num_samples": 120, "cursor": 5},
        ],
    }  # fmt: skip
    plain = _mixed(uneven_dataset, learnable_dataset)
    plain.set_epoch(1)
    whole = _keys(plain)
    plain.set_epoch(2)
    after = _keys(plain)
    resumed = _mixed(uneven_dataset, learnable_dataset)
    resumed.load_state_dict(state)
    assert _keys(resumed) == whole[2:]
    resumed.set_epoch(2)
    assert _keys(resumed) == after


def test_a_source_added_on_resume_starts_its_walk_at_zero(
    uneven_dataset: Path, learnable_dataset: Path
) -> None:
    state = _stop_after(_mixed(uneven_dataset, learnable_dataset, extra=False), 1, epoch=1)
    grown = _mixed(uneven_dataset, learnable_dataset)
    grown.load_state_dict(state)
    _keys(grown)  # the rest of epoch 1, as it was planned: one source
    nxt = _stop_after(grown, 1, epoch=2)
    cursors = [s["cursor"] for s in nxt["mixture"]["sources"]]
    assert cursors == [40, 0]  # the first source walked 20 a epoch; the new one from 0


def test_a_version_1_state_of_another_data_set_names_its_identity(
    uneven_dataset: Path, learnable_dataset: Path, state: dict
) -> None:
    v1 = {k: v for k, v in state.items() if k != "mixture"}
    v1["version"] = 1
    with pytest.raises(ConfigError) as info:
        _loader(learnable_dataset).load_state_dict(v1)
    assert f"still needs identity {state['dataset'][:12]}... (source 0" in info.value.message
