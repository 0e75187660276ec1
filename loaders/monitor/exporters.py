"""Thin, optional views of ``loader.stats()``: attach with ``loader.watch(exporter, ...)``.

Each exporter is called every ``every`` steps of the loader and at the last batch of each pass
(Prometheus is pulled instead: its endpoint reads the stats when scraped, nothing per step).

- :class:`LogExporter`: one line through Python logging (rank 0, or every rank);
- :class:`TensorBoardExporter`: scalars into a ``SummaryWriter`` you pass;
- :class:`PrometheusExporter`: an HTTP endpoint per rank (``port + LOCAL_RANK``) serving
  counters and gauges named by Prometheus' conventions (``wdstool_loader_*``; units in the
  name, ``_total`` for counters);
- :class:`CallbackExporter`: ``fn(metrics, step)`` with a flat ``{"loader/NAME": number}`` dict,
  for W&B's ``wandb.log``, Accelerate's ``accelerator.log`` or a Lightning callback.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from loaders.monitor.verdict import diagnose

log = logging.getLogger("loaders.monitor")


class Exporter:
    """Called by the loader every ``every`` steps (and at the end of a pass)."""

    every: int = 100

    def attach(self, loader: Any) -> None:
        """Called by ``loader.watch``. An exporter keeps no reference to the loader (the
        loader holds its exporters: a cycle would leave its worker processes to the garbage
        collector, which finalizes their queues before it can stop them)."""

    def export(self, loader: Any, step: int) -> None:  # pragma: no cover - an interface
        raise NotImplementedError

    @staticmethod
    def global_step(loader: Any) -> int:
        """Steps since the loader was made (all epochs): the x axis of a metrics logger."""
        return loader.meter.total.steps


class LogExporter(Exporter):
    """``loader.diagnose()`` and the rate through ``logger`` (default ``loaders.monitor``) at
    ``level``, every ``every`` steps; on rank 0 only unless ``all_ranks``."""

    def __init__(
        self,
        every: int = 500,
        *,
        all_ranks: bool = False,
        logger: logging.Logger | None = None,
        level: int = logging.INFO,
    ) -> None:
        self.every = every
        self.all_ranks = all_ranks
        self.logger = logger or log
        self.level = level

    def export(self, loader: Any, step: int) -> None:
        if not self.all_ranks and loader.topology.rank != 0:
            return
        s = loader.stats(memory=False)
        self.logger.log(
            self.level,
            "loader rank %d epoch %d step %d: %.0f samples/s, %s",
            s.rank,
            s.epoch,
            step,
            s.recent.samples_per_s,
            diagnose(s),
        )


class TensorBoardExporter(Exporter):
    """``stats().flat()`` as scalars of ``writer`` (a ``torch.utils.tensorboard.SummaryWriter``
    or anything with ``add_scalar``), at the loader's global step."""

    def __init__(self, writer: Any, every: int = 100, *, prefix: str = "loader/") -> None:
        self.writer = writer
        self.every = every
        self.prefix = prefix

    def export(self, loader: Any, step: int) -> None:
        at = self.global_step(loader)
        for name, value in loader.stats().flat(self.prefix).items():
            self.writer.add_scalar(name, value, at)


class CallbackExporter(Exporter):
    """``fn(metrics, step)`` every ``every`` steps: ``metrics`` is ``stats().flat(prefix)``,
    ``step`` the loader's global step. ``CallbackExporter(wandb.log)`` needs nothing more
    (``wandb.log(metrics, step)``)."""

    def __init__(
        self,
        fn: Callable[[dict[str, float], int], Any],
        every: int = 100,
        *,
        prefix: str = "loader/",
    ) -> None:
        self.fn = fn
        self.every = every
        self.prefix = prefix

    def export(self, loader: Any, step: int) -> None:
        self.fn(loader.stats().flat(self.prefix), self.global_step(loader))


class PrometheusExporter(Exporter):
    """An HTTP endpoint for Prometheus on ``addr:port + LOCAL_RANK`` (one per rank of a node;
    ``port=0``: any free port, see ``.port``), serving this loader's metrics with a ``rank``
    label. Needs ``prometheus_client`` (``pip install -e '.[monitor]'``). Nothing runs per
    step: a scrape reads ``loader.stats()``. ``close()`` stops the endpoint."""

    every = 1 << 62  # pulled, not pushed

    def __init__(self, port: int = 9400, addr: str = "127.0.0.1", *, per_rank: bool = True) -> None:
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            from wdstool.base.errors import ConfigError

            raise ConfigError(
                "PrometheusExporter needs prometheus_client: pip install -e '.[monitor]'"
            ) from None
        self.addr = addr
        self.port = port + (int(os.environ.get("LOCAL_RANK", "0")) if per_rank and port else 0)
        self._server: Any = None

    def attach(self, loader: Any) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(loader))
        self._server, _thread = start_http_server(self.port, self.addr, self.registry)
        self.port = self._server.server_address[1]
        log.info("loader metrics for Prometheus at http://%s:%d/metrics", self.addr, self.port)

    def export(self, loader: Any, step: int) -> None:
        pass

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


# name, help, where the value comes from (all_epochs window field, or a LoaderStats attribute)
_COUNTERS = (
    ("steps", "Batches delivered to the training loop", "steps"),
    ("samples", "Samples delivered to the training loop", "samples"),
    ("wait_seconds", "Seconds the training loop waited in next()", "wait_s"),
    ("read_bytes", "Shard bytes read", "bytes_read"),
    ("network_bytes", "Bytes received from remote storage", "network_bytes"),
    ("requests", "Requests to remote storage", "requests"),
    ("retries", "Retried reads from remote storage", "retries"),
    ("cache_hits", "Shards read from the local cache", "cache_hits"),
    ("cache_misses", "Shards not found in the local cache", "cache_misses"),
    ("cache_evictions", "Shards evicted from the local cache", "cache_evictions"),
    ("samples_replaced", "Bad samples replaced (on_error='skip')", "samples_replaced"),
)


class _Collector:
    def __init__(self, loader: Any) -> None:
        self.loader = weakref.ref(loader)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        loader = self.loader()
        if loader is None:  # gone: nothing to report
            return
        s = loader.stats()
        rank = str(s.rank)
        total, recent, m = s.all_epochs, s.recent, s.memory
        for name, text, attr in _COUNTERS:
            c = CounterMetricFamily(f"wdstool_loader_{name}", text, labels=["rank"])
            c.add_metric([rank], float(getattr(total, attr)))
            yield c
        stage = CounterMetricFamily(
            "wdstool_loader_worker_seconds", "Worker seconds per stage", labels=["rank", "stage"]
        )
        for name, seconds in total.stages_s.items():
            stage.add_metric([rank, name], seconds)
        yield stage
        gauges = (
            ("samples_per_second", "Samples per second over the last steps", recent.samples_per_s),
            ("wait_ratio", "Share of the last steps' time spent waiting", recent.wait_fraction),
            (
                "stall_ratio",
                "Share of the last steps' time spent waiting for data",
                recent.stall_fraction,
            ),
            (
                "input_bound_steps_ratio",
                "Share of the last steps that waited",
                recent.input_bound_steps,
            ),
            (
                "prefetch_occupancy_ratio",
                "Ready batches over the prefetch capacity",
                recent.prefetch_occupancy,
            ),
            ("worker_cpu_ratio", "CPU seconds per wall second of a worker", recent.worker_cpu),
            ("workers", "Workers (processes or decode threads) in force", s.workers),
            ("prefetch_factor", "Batches prefetched per worker", s.prefetch_factor),
            ("epoch", "The current epoch", s.epoch),
            ("memory_pss_bytes", "PSS of the loader's process tree", m.pss),
            ("memory_rss_bytes", "RSS of the loader's process tree", m.rss),
            ("host_memory_used_bytes", "Host memory in use (total less available)", m.host_used),
        )
        for name, text, value in gauges:
            g = GaugeMetricFamily(f"wdstool_loader_{name}", text, labels=["rank"])
            g.add_metric([rank], float(value))
            yield g


__all__ = [
    "CallbackExporter",
    "Exporter",
    "LogExporter",
    "PrometheusExporter",
    "TensorBoardExporter",
]
