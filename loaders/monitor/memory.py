"""Memory of the loader's processes and of the host, read on demand (never per batch).

The loader's processes are the training process and its DataLoader workers (read-ahead and
cache-fill threads live inside them). PSS counts a page shared by n processes 1/n in each, so
their summed PSS is what they cost the host; RSS counts shared pages (torch's libraries, the shared batch
pool) once per process. Read from ``/proc/PID/smaps_rollup`` (~6 ms for a process that has
torch loaded: its kernel walks every mapping).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Memory:
    """Bytes: the loader's processes (``rss``, ``pss``; ``owned``: their anonymous and
    shared-memory PSS, what they allocated, without the file pages of mapped shards
    and libraries that the kernel can drop; ``processes`` counted) and the host (``host_used``:
    total less available, ``host_total``)."""

    rss: int = 0
    pss: int = 0
    owned: int = 0
    processes: int = 0
    host_used: int = 0
    host_total: int = 0


def rollup(pid: int) -> dict[str, int]:
    """The kB fields of ``/proc/PID/smaps_rollup`` (empty where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return {
                ln.split(":")[0]: int(ln.split()[1])
                for ln in f
                if ln.endswith("kB\n") and ":" in ln
            }
    except (OSError, ValueError, IndexError):
        return {}


def tree_memory(pids: list[int]) -> Memory:
    """The memory of the processes ``pids`` and of the host. ~6 ms a process whose torch maps
    many libraries."""
    rss = pss = owned = n = 0
    for p in pids:
        f = rollup(p)
        if not f:  # ended meanwhile, or not ours to read
            continue
        rss += f.get("Rss", 0) * 1024
        pss += f.get("Pss", 0) * 1024
        owned += (f.get("Pss_Anon", 0) + f.get("Pss_Shmem", 0)) * 1024
        n += 1
    vm = psutil.virtual_memory()
    return Memory(rss, pss, owned, n, vm.total - vm.available, vm.total)


def owned_memory(pid: int | None = None) -> int:
    """The anonymous and shared-memory PSS of one process (default: this one), bytes."""
    f = rollup(os.getpid() if pid is None else pid)
    return (f.get("Pss_Anon", 0) + f.get("Pss_Shmem", 0)) * 1024


def host_total() -> int:
    return int(psutil.virtual_memory().total)


__all__ = ["Memory", "host_total", "owned_memory", "rollup", "tree_memory"]
