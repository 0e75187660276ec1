"""Memory stays flat over long training: 50 epochs with set_epoch and a size schedule that
changes every epoch, and 200 passes abandoned after two batches (a validation loop's ``break``),
in worker processes and in decode threads: the process tree's PSS and /dev/shm grow by at most
5% after warm-up."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from loaders import make_loader

pytestmark = pytest.mark.slow


def alternating(epoch: int) -> int:
    return 16 if epoch % 2 == 0 else 24


def _tree() -> list[int]:
    """This process and all its descendants (DataLoader workers)."""
    out, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())
        except OSError:
            continue
    return out


# Only what the tree owns is measured, so that other processes on the machine (make test runs two
# test processes) cannot move the figures: a shared library's pages are split between every
# process that maps it, and /dev/shm's use is the machine's.
OWN = ("[", "/dev/shm/", "/memfd:", "/dev/zero", "/SYSV")


def _memory() -> tuple[int, int]:
    """(PSS of the tree's own memory: anonymous, heap, stack, shared memory; bytes of the
    shared-memory objects the tree holds open or mapped, each counted once)."""
    pss, shm = 0, {}
    for pid in _tree():
        try:
            with open(f"/proc/{pid}/smaps") as f:
                own = False
                for line in f:
                    head = line.split(maxsplit=5)
                    if not head[0].endswith(":"):  # a mapping: ADDR PERMS OFFSET DEV INODE [PATH]
                        path = head[5].strip() if len(head) > 5 else ""
                        own = not path or path.startswith(OWN)
                        if path.startswith("/dev/shm/"):
                            st = os.stat(f"/proc/{pid}/map_files/{head[0]}")
                            shm[st.st_dev, st.st_ino] = st.st_blocks * 512
                    elif own and head[0] == "Pss:":
                        pss += int(head[1]) * 1024
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/dev/shm/"):
                        st = os.stat(f"/proc/{pid}/fd/{fd}")
                        shm[st.st_dev, st.st_ino] = st.st_blocks * 512
        except (FileNotFoundError, ProcessLookupError):
            continue  # a worker that ended meanwhile
    return pss, sum(shm.values())


def _grows(warmup, run) -> tuple[float, float]:
    warmup()
    pss0, shm0 = _memory()
    run()
    pss1, shm1 = _memory()
    return (pss1 - pss0) / pss0, (shm1 - shm0) / max(shm0, 1)


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
