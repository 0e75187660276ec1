"""The autotuner's settings as ``make_loader`` takes them (``num_workers="auto"``,
``prefetch_factor="auto"``, ``memory_budget``): checked, turned into an :class:`AutoSpec`, and
the workers a loader starts with."""

from __future__ import annotations

from typing import Any

from loaders.monitor.autotune import WORKER_ESTIMATE, AutoSpec
from loaders.monitor.memory import host_total, owned_memory
from loaders.topology import cores_per_rank, local_world_size
from wdstool.base.errors import ConfigError
from wdstool.base.params import parse_size

AUTO_PREFETCH = 2  # prefetch_factor="auto" starts here and deepens where steps wait
BUDGET_SHARE = 0.8  # the guides' "memory < 80%", over the node's ranks


def default_num_workers() -> int:
    """Worker processes per rank: the cores available to this rank, at most 8."""
    return min(8, cores_per_rank())


def auto_spec(
    num_workers: Any, prefetch_factor: Any, budget: Any, stats: bool, mode: str
) -> AutoSpec | None:
    """The autotuner's settings, or None where nothing is "auto" (a ConfigError for another
    word, for "auto" without stats, for a budget that is not a size, or for one below what
    this process already holds)."""
    for name, value in (("num_workers", num_workers), ("prefetch_factor", prefetch_factor)):
        if isinstance(value, str) and value != "auto":
            raise ConfigError(f'{name}={value!r}: give an int or "auto"')
    workers, prefetch = num_workers == "auto", prefetch_factor == "auto"
    if not (workers or prefetch):
        if budget is not None:
            raise ConfigError(
                'memory_budget applies to num_workers="auto" / prefetch_factor="auto"'
            )
        return None
    if not stats:
        raise ConfigError('"auto" settings need the loader\'s stats: drop stats=False')
    limit = _budget(budget)
    main = owned_memory()
    if limit < main:
        raise ConfigError(
            f"memory_budget={limit / 1e6:.0f} MB is below what this process already holds "
            f"({main / 1e6:.0f} MB); give the loader more"
        )
    cap = 0
    if workers:  # decode threads: up to 2 per core (a thread waits on the GIL part of its time)
        cap = default_num_workers() if str(mode) == "process" else min(8, 2 * cores_per_rank())
    return AutoSpec(workers=workers, prefetch=prefetch, max_workers=cap, budget=limit)


def _budget(budget: Any) -> int:
    """``memory_budget`` in bytes (default: a share of the host over the node's ranks)."""
    total = host_total()
    if budget is None:
        return int(BUDGET_SHARE * total / max(1, local_world_size()))
    if isinstance(budget, float) and not isinstance(budget, bool):
        if not 0 < budget <= 1:
            raise ConfigError(f"memory_budget={budget!r}: a share of the host is in (0, 1]")
        return int(budget * total)
    try:
        limit = parse_size(budget)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"memory_budget: {exc}") from None
    if limit <= 0:
        raise ConfigError(f"memory_budget must be positive, got {budget!r}")
    return limit


def first_workers(auto: AutoSpec | None, num_workers: Any, mode: str) -> int:
    """The workers to start with (``num_workers`` None: :func:`default_num_workers`). Decode
    threads: the plan's streams, up to 2 a core (how many decode at once is gated from the
    first batch: ``Autotuner.start``). Worker processes: as many as the budget holds at
    :data:`WORKER_ESTIMATE` each beside this process, at least one."""
    if num_workers is None:
        return default_num_workers()
    if auto is None or not auto.workers:
        return int(num_workers)
    if str(mode) == "thread":
        return auto.max_workers
    return max(1, min(auto.max_workers, (auto.budget - owned_memory()) // WORKER_ESTIMATE))


def first_prefetch(prefetch_factor: Any) -> int:
    return AUTO_PREFETCH if prefetch_factor == "auto" else prefetch_factor  # type: ignore[no-any-return]


def describe_auto(auto: AutoSpec, workers: int, mode: str, prefetch: int) -> str:
    what = " and ".join(
        n for n, on in (("workers", auto.workers), ("prefetch", auto.prefetch)) if on
    )
    return (
        f"{what} tuned from {workers} {mode} workers, prefetch "
        f"{prefetch}, at most {auto.max_workers or workers} workers, memory budget "
        f"{auto.budget / 1e9:.1f} GB"
    )


__all__ = [
    "AUTO_PREFETCH",
    "auto_spec",
    "default_num_workers",
    "describe_auto",
    "first_prefetch",
    "first_workers",
]
