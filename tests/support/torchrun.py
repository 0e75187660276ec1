"""torchrun jobs for the tests: on 127.0.0.1 (a free port), one thread per rank, the
repository importable in every rank."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.conftest import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_ddp_cmd(nproc: int, *args: str, script: str = "train_ddp.py") -> list[str]:
    """torchrun of examples/``script`` on 127.0.0.1 with ``nproc`` ranks."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(REPO / "examples" / script),
        *args,
    ]


def torchrun_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def torchrun(nproc: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = train_ddp_cmd(nproc, *args)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=torchrun_env()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc
