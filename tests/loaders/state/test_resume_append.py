"""A loader state saved on one version of a data set, resumed after `pack --append` added
another: the interrupted epoch finishes exactly on the old version's samples, the next epochs
read every version; a data set that is not a later version is a one-line error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from loaders import Source, make_loader
from shard_writer.pack import PackOptions, pack
from tests.conftest import make_tree
from wdstool.base.errors import ConfigError


@pytest.fixture(scope="module")
def versions(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(version 1: 26 samples in 4 shards, the same data set once 9 samples were appended,
    another data set of 10 samples)."""
    root = tmp_path_factory.mktemp("append-resume")
    v1 = root / "v1"
    pack(
        str(make_tree(root / "t1", {"a": 14, "b": 12}, seed=21)),
        str(v1),
        PackOptions(workers=1, max_count=7),
    )
    v2 = root / "v2"
    shutil.copytree(v1, v2)
    more = make_tree(root / "t2", {"a": 4, "b": 3, "c": 2}, seed=22)
    pack(str(more), str(v2), PackOptions(workers=1, max_count=7, append=True))
    other = root / "other"
    pack(str(make_tree(root / "t3", {"x": 10}, seed=23)), str(other), PackOptions(workers=1))
    return v1, v2, other


def _loader(source, **kw):
    return make_loader(source, 4, image_size=16, num_workers=0, seed=3, shuffle_buffer=6, **kw)


def _keys(loader, epoch: int) -> list[str]:
    loader.set_epoch(epoch)
    return [k for b in loader for k in b["keys"]]


def _state_after(loader, epoch: int, batches: int) -> dict:
    loader.set_epoch(epoch)
    it = iter(loader)
    for _ in range(batches):
        next(it)
    return json.loads(json.dumps(loader.state_dict()))


def test_an_epoch_planned_on_version_1_finishes_on_it(versions) -> None:
    v1, v2, _ = versions
    whole = _keys(_loader(v1), 2)
    state = _state_after(_loader(v1), 2, 3)
    resumed = _loader(v2)  # the data set, appended to meanwhile
    resumed.load_state_dict(state)
    rest = [k for b in resumed for k in b["keys"]]
    assert rest == whole[12:]  # exactly version 1's epoch, as if never interrupted
    assert len(resumed) == len(whole) // 4 + (len(whole) % 4 > 0)
    nxt = _keys(resumed, 3)  # from the next epoch on: every version
    assert nxt == _keys(_loader(v2), 3)
    assert len(nxt) == len(set(nxt)) == 35


def test_a_state_saved_within_the_resumed_epoch_still_finishes_version_1(versions) -> None:
    v1, v2, _ = versions
    whole = _keys(_loader(v1), 0)
    first = _loader(v2)
    first.load_state_dict(_state_after(_loader(v1), 0, 2))
    it = iter(first)
    got = [k for _ in range(2) for k in next(it)["keys"]]
    state = json.loads(json.dumps(first.state_dict()))
    assert state["num_samples"] == 26  # still version 1's epoch
    again = _loader(v2)
    again.load_state_dict(state)
    assert got + [k for b in again for k in b["keys"]] == whole[8:]


def test_a_mixture_finishes_the_old_window_of_an_appended_source(versions) -> None:
    v1, v2, other = versions

    def mix(first: Path):
        return _loader([Source(first, weight=1), Source(other, weight=1)], epoch_size=16)

    whole = _keys(mix(v1), 1)
    resumed = mix(v2)
    resumed.load_state_dict(_state_after(mix(v1), 1, 2))
    assert [k for b in resumed for k in b["keys"]] == whole[8:]
    assert _keys(resumed, 2) == _keys(mix(v2), 2)


def test_a_data_set_that_is_not_a_later_version_is_a_one_line_error(versions, tmp_path) -> None:
    v1, _, _ = versions
    state = _state_after(_loader(v1), 0, 1)
    repacked = tmp_path / "v1"
    shutil.copytree(v1, repacked)
    more = make_tree(tmp_path / "t", {"a": 3}, seed=30)
    pack(str(more), str(repacked), PackOptions(workers=1, overwrite=True))
    state["mixture"]["sources"][0]["url"] = str(repacked)  # the same place, other data
    loader = _loader(repacked)
    with pytest.raises(ConfigError, match="neither that version nor one appended to it") as exc:
        loader.load_state_dict(state)
    assert "\n" not in str(exc.value)
