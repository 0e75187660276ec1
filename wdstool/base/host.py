"""The machine this process runs on: the cores it may use, this job on it, and a short
description for reports.

Every "how many processes" default (pack's workers, sample-data's, the loader's workers per
rank, the benchmark's host line) starts from :func:`usable_cores`, so they agree on a machine
whose CPUs are narrowed by a container, ``taskset`` or a batch scheduler.
"""

from __future__ import annotations

import os
import platform
from typing import Any


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, which containers, ``taskset``
    and schedulers narrow; all of the machine's where there is no mask); at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux (macOS has no affinity masks)
        return max(1, os.cpu_count() or 1)


def job_on_host() -> str:
    """This job on this host, the same in every process of it: torchrun's agent (the parent of
    every rank) under torchrun, else this process (the parent of its DataLoader workers), with
    that process's start time (pids are reused)."""
    pid = os.getppid() if os.environ.get("TORCHELASTIC_RUN_ID") else os.getpid()
    try:
        import psutil

        started = psutil.Process(pid).create_time()
    except Exception:  # pragma: no cover - a process gone, or no /proc
        started = 0.0
    return f"{pid}-{started:.3f}"


def host_info() -> dict[str, Any]:
    """The machine a benchmark ran on: cores this process may use, CPU model, OS, Python."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model
            )
    except OSError:
        pass
    return {
        "cores": usable_cores(),
        "cpu_model": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
