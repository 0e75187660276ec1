"""read_slices opens the next remote shard while the current one is read; errors stay in order."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from loaders.plan import Slice
from loaders.read import read_slices
from loaders.source import DatasetIndex, ShardAccess
from wdstool.base.errors import ShardError


class _Recording(ShardAccess):
    """Local files treated as remote; records when each shard is opened and first read."""

    def __init__(self, events: list[str], missing: set[str] | None = None) -> None:
        super().__init__()
        object.__setattr__(self, "_events", events)
        object.__setattr__(self, "_missing", missing or set())

    @staticmethod
    def is_remote(url: str) -> bool:
        return True

    def open(self, url: str, **kw):
        name = Path(url).name
        self._events.append(f"open {name} in {threading.current_thread().name.split('_')[0]}")
        if name in self._missing:
            raise ShardError(f"{url}: shard not found")
        return super().open(url, **kw)


def _index(dataset: Path) -> DatasetIndex:
    m = json.loads((dataset / "index.json").read_text())
    return DatasetIndex(
        urls=tuple(str(dataset / e["url"]) for e in m["shardlist"]),
        sizes=tuple(e["nsamples"] for e in m["shardlist"]),
    )


def test_next_shard_is_opened_before_the_current_one_ends(uneven_dataset: Path) -> None:
    index = _index(uneven_dataset)
    events: list[str] = []
    slices = [Slice(0, 0, 10), Slice(1, 2, 10), Slice(2, 0, 3)]
    keys = []
    for loc in read_slices(slices, index, _Recording(events)):
        events.append(f"sample {Path(loc.url).name}")
        keys.append(loc.sample.key)
    assert len(keys) == 10 + 8 + 3
    # shard 1 was opened (in the open-ahead thread) before shard 0's last sample was handed out
    first_s1 = events.index("open train-000001.tar in shard-open-ahead")
    last_s0 = max(i for i, e in enumerate(events) if e == "sample train-000000.tar")
    assert first_s1 < last_s0
    assert "open train-000000.tar in MainThread" in events
    plain = [loc.sample.key for loc in read_slices(slices, index, ShardAccess())]
    assert keys == plain


def test_an_open_ahead_failure_surfaces_only_when_its_shard_is_reached(
    uneven_dataset: Path,
) -> None:
    index = _index(uneven_dataset)
    events: list[str] = []
    got = []
    with pytest.raises(ShardError, match=r"train-000001\.tar: shard not found"):
        for loc in read_slices(
            [Slice(0, 0, 10), Slice(1, 0, 10)], index, _Recording(events, {"train-000001.tar"})
        ):
            got.append(loc.sample.key)
    assert len(got) == 10  # every sample of shard 0 came first
