"""worker_mode="thread": decode threads in the loader's process deliver what worker processes do."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch

from loaders import make_loader
from wdstool.base.errors import WdsToolError


def batches(loader, epoch: int = 0) -> list[tuple[tuple[str, ...], torch.Tensor, torch.Tensor]]:
    loader.set_epoch(epoch)
    return [(tuple(b["keys"]), b["labels"].clone(), b["pixel_values"].clone()) for b in loader]


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        x[0] == y[0] and torch.equal(x[1], y[1]) and torch.equal(x[2], y[2])
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize(
    "kw", [{}, {"output": "float"}, {"channels_last": True}, {"train": False, "shuffle": False}]
)
def test_threads_deliver_the_process_modes_batches(learnable_dataset: Path, workers, kw) -> None:
    def make(mode: str):
        return make_loader(
            str(learnable_dataset), 8, image_size=24, num_workers=workers, seed=3,
            worker_mode=mode, rank=1, world_size=2, **kw,
        )  # fmt: skip

    threaded, processes = make("thread"), make("process")
    for epoch in (0, 1):
        assert same(batches(threaded, epoch), batches(processes, epoch))


def test_resume_crosses_modes(learnable_dataset: Path) -> None:
    def make(mode: str, workers: int = 2):
        return make_loader(
            str(learnable_dataset), 8, image_size=24, num_workers=workers, seed=5, worker_mode=mode
        )

    full = [tuple(b["keys"]) for b in make("process")]
    first = make("thread")
    it = iter(first)
    head = [tuple(next(it)["keys"]) for _ in range(4)]
    state = json.loads(json.dumps(first.state_dict()))
    del it
    for mode in ("process", "thread"):
        rest = make(mode)
        rest.load_state_dict(state)
        assert head + [tuple(b["keys"]) for b in rest] == full


def test_breaking_out_stops_the_threads(learnable_dataset: Path) -> None:
    loader = make_loader(
        str(learnable_dataset), 4, image_size=24, num_workers=2, worker_mode="thread"
    )
    for i, _b in enumerate(loader):
        if i == 2:
            break
    alive = [t.name for t in threading.enumerate() if t.name.startswith("wdstool-decode")]
    assert not alive


def test_a_worker_error_is_one_line(tmp_path: Path, learnable_dataset: Path) -> None:
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(learnable_dataset, ds)
    (ds / "train-000001.tar").unlink()
    loader = make_loader(str(ds), 4, image_size=24, num_workers=2, worker_mode="thread")
    with pytest.raises(WdsToolError) as err:
        list(loader)
    assert "train-000001.tar" in err.value.message and "\n" not in err.value.message
    assert not [t for t in threading.enumerate() if t.name.startswith("wdstool-decode")]


def test_bad_mode_is_a_config_error(learnable_dataset: Path) -> None:
    from wdstool.base.errors import ConfigError

    with pytest.raises(ConfigError, match="worker_mode='fibres'"):
        make_loader(str(learnable_dataset), 4, worker_mode="fibres")
