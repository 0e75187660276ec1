"""Memory stays flat over long training: 50 epochs with set_epoch and a size schedule that
changes every epoch, and 200 passes abandoned after two batches (a validation loop's ``break``),
in worker processes and in decode threads: the process tree's PSS and /dev/shm grow by at most
5% after warm-up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loaders import make_loader

pytestmark = pytest.mark.slow


def alternating(epoch: int) -> int:
    return 16 if epoch % 2 == 0 else 24


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith("Pss:")) * 1024
    except (OSError, StopIteration):
        return 0


def _tree_pss() -> int:
    me = os.getpid()
    children = Path(f"/proc/{me}/task/{me}/children").read_text().split()
    return _pss(me) + sum(_pss(int(c)) for c in children)


def _shm_used() -> int:
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _grows(warmup, run) -> tuple[float, float]:
    warmup()
    pss0, shm0 = _tree_pss(), _shm_used()
    run()
    return (_tree_pss() - pss0) / pss0, (_shm_used() - shm0) / max(shm0, 1)


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_memory_is_flat_over_epochs_and_abandoned_passes(uneven_dataset: Path, mode: str) -> None:
    loader = make_loader(
        uneven_dataset,
        4,
        image_size=alternating,
        num_workers=2,
        prefetch_factor=2,
        worker_mode=mode,
    )

    def epochs(first: int, last: int) -> None:
        for e in range(first, last):
            loader.set_epoch(e)
            for batch in loader:
                del batch

    def abandoned(times: int) -> None:
        for _ in range(times):
            for i, batch in enumerate(loader):
                del batch
                if i == 1:
                    break

    pss, shm = _grows(lambda: epochs(0, 6), lambda: epochs(6, 50))
    assert pss <= 0.05 and shm <= 0.05, (mode, "epochs", pss, shm)
    pss, shm = _grows(lambda: abandoned(20), lambda: abandoned(200))
    assert pss <= 0.05 and shm <= 0.05, (mode, "abandoned", pss, shm)
