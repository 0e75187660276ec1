"""Counters kept where the work happens, taken (read and reset) by whoever reports them.

Two kinds, both cheap enough to stay on:

- **stage seconds** (:func:`add_time`): wall time a thread spent in a stage (``decode``,
  ``tail``), kept per thread without a lock: the thread that decodes is the one that reports
  (a DataLoader worker's main thread, or a decode thread);
- **events** (:func:`count`): storage bytes, requests, retries, cache hits, misses and
  evictions, kept per process under a lock (they happen in read-ahead and cache-fill threads
  too, a few per megabyte).

:func:`take` hands the calling thread its stage seconds and the process's events since the
last take, and resets them, so that several reporters in one process (decode threads) never
count an event twice. ``enabled`` switches the stage clocks off (``make_loader(stats=False)``,
the benchmark's "off"); events are always counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_local = threading.local()
_events: dict[str, float] = {}
_lock = threading.Lock()
enabled = True


def _times() -> dict[str, float]:
    t = getattr(_local, "times", None)
    if t is None:
        t = _local.times = {}
    return t


def add_time(stage: str, seconds: float) -> None:
    """Add ``seconds`` of this thread's wall time to ``stage``."""
    t = _times()
    t[stage] = t.get(stage, 0.0) + seconds


def timed(stage: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, its wall time added to this thread's ``stage`` (while ``enabled``)."""
    if not enabled:
        return fn(*args)
    t0 = time.perf_counter()
    try:
        return fn(*args)
    finally:
        add_time(stage, time.perf_counter() - t0)


def count(name: str, n: float = 1) -> None:
    """Add ``n`` to this process's event counter ``name``."""
    with _lock:
        _events[name] = _events.get(name, 0) + n


def forget(*, events: bool) -> None:
    """Drop this thread's stage seconds, and with ``events`` the process's events (what a
    forked worker inherited, or what the loader's process counted before a pass)."""
    _local.times = {}
    if events:
        global _events
        with _lock:
            _events = {}


def take() -> dict[str, float]:
    """This thread's stage seconds and this process's events since the last take (reset)."""
    global _events
    out = dict(_times())
    _local.times = {}
    if _events:
        with _lock:
            events, _events = _events, {}
        for k, v in events.items():
            out[k] = out.get(k, 0) + v
    return out


__all__ = ["add_time", "count", "enabled", "forget", "take", "timed"]
