"""The peer runners' memory monitor: peak RSS and PSS summed over a run's process tree."""

from __future__ import annotations

import os
import threading


class MemoryMonitor:
    """Samples RSS summed over this process and all its descendants (and PSS, from
    /proc/PID/smaps_rollup where readable) every ``period`` seconds; keeps the peaks."""

    def __init__(self, period: float = 2.0) -> None:
        import psutil  # noqa: F401  (fails here, before the run, where it is missing)

        self.period = period
        self.peak_rss = 0
        self.peak_pss: int | None = None
        self.peak_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mem-monitor", daemon=True)

    def __enter__(self) -> MemoryMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def sample(self) -> None:
        import psutil

        me = psutil.Process(os.getpid())
        try:
            procs = [me, *me.children(recursive=True)]
        except psutil.Error:
            procs = [me]
        rss = 0
        pss: int | None = 0
        for p in procs:
            try:
                rss += p.memory_info().rss
            except psutil.Error:
                continue
            one = _pss(p.pid)
            pss = None if one is None or pss is None else pss + one
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_procs = max(self.peak_procs, len(procs))
        if pss is not None:
            self.peak_pss = max(self.peak_pss or 0, pss)


def _pss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
