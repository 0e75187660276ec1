"""Watching the loader while it trains: ``loader.stats()``, ``loader.diagnose()``, exporters.

Counters are kept where the work happens (the worker's clock, the decoder, the storage reader,
the cache: ``loaders.monitor.clock``, ``wdstool.base.counters``) and gathered into one stats
object per loader (``loaders.monitor.stats``); the verdict (``loaders.monitor.verdict``), the
exporters (``loaders.monitor.exporters``) and the autotuner (``loaders.monitor.autotune``) read
that object. None of it changes the plan.
"""

from loaders.monitor.stats import LoaderStats, Window
from loaders.monitor.verdict import Verdict, diagnose

__all__ = ["LoaderStats", "Verdict", "Window", "diagnose"]
