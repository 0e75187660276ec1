"""Each exporter against its real library: a TensorBoard event file read back with
TensorBoard's own reader, a Prometheus endpoint scraped over HTTP and parsed with
prometheus_client's parser, log records, a callback."""

from __future__ import annotations

import logging
import urllib.request
from pathlib import Path

import pytest

from loaders import make_loader
from loaders.monitor.exporters import (
    CallbackExporter,
    LogExporter,
    PrometheusExporter,
    TensorBoardExporter,
)
from wdstool.base.errors import ConfigError


def _epochs(loader, n: int = 1) -> None:
    for e in range(n):
        loader.set_epoch(e)
        for _ in loader:
            pass


def test_tensorboard_scalars_read_back(photos: Path, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    loader = make_loader(str(photos), 16, image_size=64, num_workers=1)
    with SummaryWriter(str(tmp_path)) as writer:
        loader.watch(TensorBoardExporter(writer, every=2))
        _epochs(loader, 2)
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"loader/samples_per_s", "loader/wait_fraction", "loader/stage_share/decode"} <= set(
        tags
    )
    samples = acc.Scalars("loader/epoch_samples")
    # every 2 steps and at each epoch's last (6 batches): steps 2, 4, 6 of each epoch
    assert [e.step for e in samples] == [2, 4, 6, 8, 10, 12]
    assert [e.value for e in samples] == [32, 64, 96, 32, 64, 96]
    assert all(e.value > 0 for e in acc.Scalars("loader/samples_per_s"))


def test_prometheus_endpoint_scraped(photos: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    loader = make_loader(str(photos), 16, image_size=64, num_workers=1)
    exporter = PrometheusExporter(port=0)  # any free port on 127.0.0.1
    loader.watch(exporter)
    try:
        _epochs(loader, 2)
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    finally:
        exporter.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # counters (their samples carry _total), gauges, one label per rank
    assert families["wdstool_loader_samples"].type == "counter"
    assert families["wdstool_loader_memory_pss_bytes"].type == "gauge"

    def value(name: str, **labels: str) -> float:
        family = families[name]
        for s in family.samples:
            if s.labels == {"rank": "0", **labels} and not s.name.endswith("_created"):
                return s.value
        raise AssertionError(f"{name} {labels} not in the scrape")

    s = loader.stats()
    assert value("wdstool_loader_samples") == 192 == s.all_epochs.samples
    assert value("wdstool_loader_steps") == 12
    assert value("wdstool_loader_read_bytes") == s.all_epochs.bytes_read > 0
    assert value("wdstool_loader_worker_seconds", stage="decode") > 0
    assert value("wdstool_loader_workers") == 1
    assert value("wdstool_loader_memory_pss_bytes") > 0
    assert 0 <= value("wdstool_loader_wait_ratio") <= 1
    with pytest.raises(OSError):  # closed: nothing listens there any more
        urllib.request.urlopen(url, timeout=2)


def test_log_lines_on_rank_zero_and_a_callback(photos: Path, caplog) -> None:
    got: list[tuple[dict, int]] = []
    loader = make_loader(str(photos), 16, image_size=64, num_workers=1)
    with caplog.at_level(logging.INFO, logger="loaders.monitor"):
        _epochs(loader)  # the default: one line at the end of the epoch
    lines = [r.getMessage() for r in caplog.records if r.name == "loaders.monitor"]
    assert len(lines) == 1 and lines[0].startswith("loader rank 0 epoch 0 step 6: ")
    caplog.clear()
    loader.exporters.clear()
    loader.watch(LogExporter(every=3), CallbackExporter(lambda m, step: got.append((m, step)), 4))
    with caplog.at_level(logging.INFO, logger="loaders.monitor"):
        _epochs(loader)
    lines = [r.getMessage() for r in caplog.records if r.name == "loaders.monitor"]
    assert len(lines) == 2 and all("loader rank 0 epoch 0 step" in ln for ln in lines)
    assert "input-bound" in lines[-1] and "samples/s" in lines[-1]
    assert [step for _m, step in got] == [10, 12]  # the loader's steps since it was made
    assert got[-1][0]["loader/epoch_samples"] == 96.0
    # another rank logs only when asked to
    other = make_loader(str(photos), 16, image_size=64, num_workers=0, rank=1, world_size=2)
    caplog.clear()
    other.watch(LogExporter(every=1))
    with caplog.at_level(logging.INFO, logger="loaders.monitor"):
        _epochs(other)
    assert not [r for r in caplog.records if r.name == "loaders.monitor"]
    other.watch(LogExporter(every=100, all_ranks=True))
    with caplog.at_level(logging.INFO, logger="loaders.monitor"):
        _epochs(other)
    assert [r.getMessage()[:24] for r in caplog.records if r.name == "loaders.monitor"] == [
        "loader rank 1 epoch 0 st"
    ]


def test_watching_a_loader_without_stats_is_an_error(photos: Path) -> None:
    loader = make_loader(str(photos), 16, image_size=64, num_workers=0, stats=False)
    with pytest.raises(RuntimeError, match="stats=False"):
        loader.watch(LogExporter())
    with pytest.raises(ConfigError, match="stats=False"):
        make_loader(str(photos), 16, num_workers="auto", stats=False)
