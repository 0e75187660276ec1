"""One "usable cores" for every default that counts processes: pack's workers, the loader's
cores per rank and the benchmark's host line all follow the affinity mask, as containers and
``taskset`` set it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

needs_affinity = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="no CPU affinity masks on this platform"
)

_NARROWED = """
import json, os, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from wdstool.base.host import host_info, usable_cores
from shard_writer import PackOptions, pack
summary = pack(sys.argv[1], sys.argv[2], PackOptions(max_count=2))
print(json.dumps({"usable": usable_cores(), "host": host_info()["cores"],
                  "pack_workers": summary.workers}))
"""


@needs_affinity
def test_every_default_follows_the_affinity_mask(small_tree, tmp_path) -> None:
    """In a process narrowed to one core (as ``taskset -c 0`` does), the host line and pack's
    default worker count see one, whatever ``os.cpu_count()`` says about the machine."""
    proc = subprocess.run(
        [sys.executable, "-c", _NARROWED, str(small_tree), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=True,
    )
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"usable": 1, "host": 1, "pack_workers": 1}


@needs_affinity
def test_the_loaders_share_the_usable_cores_among_a_nodes_ranks(monkeypatch) -> None:
    from loaders.topology import cores_per_rank

    mask = os.sched_getaffinity(0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(len(mask) + 1))  # more ranks than cores
    assert cores_per_rank() == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert cores_per_rank() == len(mask)
