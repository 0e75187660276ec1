"""stream-bench: every figure present, sweeps run, idle accounting is right, baselines read the same data."""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path

import pytest
import torch

from loaders.bench.baselines import imagefolder_loader, webdataset_loader
from loaders.bench.run import BenchConfig, run_stream_bench
from loaders.make import make_loader
from tests.conftest import run_cli
from tests.loaders.conftest import shard_keys
from wdstool.base.errors import ConfigError


class SlowTransform:
    """A per-sample transform that sleeps: with batch 4, 20 ms of loading per batch."""

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        time.sleep(0.005)
        return img[:, :8, :8].contiguous()


@pytest.mark.full
def test_cli_json_has_every_field_and_sweep_runs(uneven_dataset: Path, tmp_path: Path) -> None:
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    r = run_cli(
        "stream-bench",
        str(uneven_dataset),
        "--workers",
        "0,1",
        "--batch-size",
        "4",
        "--image-size",
        "32",
        "--repeats",
        "1",
        "--ceiling",
        "--json",
        str(out),
        "--plot",
        str(plot),
        "-q",
    )
    report = json.loads(out.read_text())
    assert {
        "config",
        "machine",
        "runs",
        "summary",
        "ratios",
        "ceiling",
        "recommendation",
        "interrupted",
        "avg_sample_bytes",
    } <= report.keys()
    assert report["machine"]["cores"] >= 1 and report["machine"]["torch"]
    assert len(report["runs"]) == 2  # 2 worker counts x 1 repeat
    for run in report["runs"]:
        for key in (
            "samples_per_s",
            "mb_per_s",
            "time_to_first_batch",
            "wait_ms",
            "spikes",
            "idle_pct",
            "cpu_util_pct",
            "peak_rss_main_mb",
            "peak_rss_workers_mb",
        ):
            assert run[key] is not None, key
        assert run["samples"] > 0 and set(run["wait_ms"]) >= {"p50", "p95", "p99", "max"}
        # the loader's own stats, the fields of loader.stats(), and its verdict
        stats = run["loader_stats"]
        assert stats["workers"] == run["workers"] and stats["epoch_so_far"]["samples"] > 0
        assert set(stats["epoch_so_far"]["stages_s"]) == {
            "read",
            "decode",
            "resize",
            "tail",
            "assembly",
            "handoff",
        }
        assert run["verdict"]
    one_worker = [x for x in report["runs"] if x["workers"] == 1]
    assert all(x["peak_rss_workers_mb"] > 0 for x in one_worker)
    assert set(report["ceiling"]) == {"0", "1"} and report["summary"][0]["efficiency"] > 0
    from wdstool.format.decode import PARTIAL_DECODE

    assert report["decoder"] == ("partial" if PARTIAL_DECODE else "whole")
    if PARTIAL_DECODE:  # the whole-image ceiling beside the loader's own
        assert all(c["whole_image_samples_per_s"] > 0 for c in report["ceiling"].values())
        assert "decoding whole images" in r.stdout
    assert report["recommendation"]["num_workers"] in (0, 1) and report["recommendation"]["why"]
    assert "samples/s" in r.stdout and "recommendation" in r.stdout
    assert "verdict (wdstool, 1 workers): " in r.stdout
    assert plot.stat().st_size > 10_000


def test_step_ms_idle_accounting(uneven_dataset: Path) -> None:
    def idle(step_ms: float) -> float:
        cfg = BenchConfig(
            source=str(uneven_dataset),
            loader={"batch_size": 4, "transform": SlowTransform(), "prefetch_factor": 4},
            workers=(1,),
            batches=6,
            repeats=1,
            step_ms=step_ms,
            warmup=1,
        )
        (run,) = run_stream_bench(cfg)["runs"]
        return run["idle_pct"]

    starved, fed = idle(0), idle(200)
    assert starved > 80, starved  # nothing to do but wait for a 20 ms batch
    assert fed < 15, fed  # a 200 ms step hides a 20 ms load entirely


def test_baselines_read_the_same_samples(uneven_dataset: Path) -> None:
    keys = {k for ks in shard_keys(uneven_dataset) for k in ks}
    urls = [str(p) for p in sorted(uneven_dataset.glob("*.tar"))]
    seen = []
    for _img, _label, batch_keys in webdataset_loader(
        urls, workers=1, batch_size=4, image_size=32, prefetch_factor=2
    ):
        seen.extend(batch_keys)
    assert sorted(seen) == sorted(keys)
    fast = []
    for img, _label, batch_keys in webdataset_loader(
        urls, workers=1, batch_size=4, image_size=32, prefetch_factor=2, same_decoder=True
    ):
        assert img.dtype == torch.uint8 and img.shape[1:] == (3, 32, 32)
        fast.extend(batch_keys)
    assert sorted(fast) == sorted(keys)
    manifest_paths = set()
    import webdataset as wds

    for url in urls:
        for s in wds.WebDataset(url, shardshuffle=False):
            manifest_paths.add(json.loads(s["json"])["path"])
    src = uneven_dataset.parent / "src"
    loader = imagefolder_loader(str(src), workers=0, batch_size=4, image_size=32, prefetch_factor=2)
    folder_paths = {str(Path(p).relative_to(src)) for p, _ in loader.dataset.samples}
    assert folder_paths == manifest_paths
    assert sum(len(b[1]) for b in loader) == len(keys)


def test_an_unknown_loader_keyword_is_a_config_error_naming_it() -> None:
    """BenchConfig.loader holds make_loader's keywords: a misspelt one fails where the
    configuration is built, by its name; a setting left out reads as make_loader's default."""
    with pytest.raises(ConfigError, match="make_loader has no keyword 'batchsize'"):
        BenchConfig(source="unused", loader={"batchsize": 8})
    with pytest.raises(ConfigError, match="'num_workers' is set by the benchmark"):
        BenchConfig(source="unused", loader={"num_workers": 2})
    cfg = BenchConfig(source="unused", loader={"batch_size": 8})
    defaults = inspect.signature(make_loader).parameters
    assert cfg.setting("batch_size") == 8
    assert cfg.setting("prefetch_factor") == defaults["prefetch_factor"].default
    assert cfg.setting("image_size") is defaults["image_size"].default


def test_the_cli_sets_only_make_loader_keywords(
    uneven_dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every loader setting stream-bench's options feed is a make_loader keyword (checked here
    against its signature, not only by BenchConfig), and the options whose defaults are the
    benchmark's own (image size, uint8, one rank of one) reach the loader explicitly."""
    from click.testing import CliRunner

    import loaders.bench.run as bench_run
    from wdstool.cli import cli

    built: list[BenchConfig] = []

    def capture(cfg: BenchConfig, **kw: object) -> dict:
        built.append(cfg)
        raise SystemExit(0)  # the configuration is what this test reads

    monkeypatch.setattr(bench_run, "run_stream_bench", capture)
    every = [
        "--batch-size", "4", "--prefetch-factor", "2", "--output", "float", "--channels-last",
        "--eval", "--exact-decode", "--world-size", "2", "--rank", "1", "--label", "none",
        "--field", "caption=txt", "--epoch-size", "10", "--worker-mode", "thread",
        "--cache-dir", "cache", "--cache-limit", "1GB", "--anon",
    ]  # fmt: skip
    runner = CliRunner()
    for args in ([], every, ["--transform", "randaug"]):
        result = runner.invoke(cli, ["stream-bench", str(uneven_dataset), *args])
        assert result.exit_code == 0, result.output
    plain, full, preset = (cfg.loader for cfg in built)
    keywords = set(inspect.signature(make_loader).parameters) - {"source", "num_workers"}
    for loader in (plain, full, preset):
        assert set(loader) <= keywords, set(loader) - keywords
    assert plain["image_size"] == 224 and plain["output"] == "uint8"
    assert (plain["world_size"], plain["rank"]) == (1, 0)
    assert full["label"] is None and full["fields"] == {"caption": "txt"}
    assert not full["train"] and not full["scaled_decode"] and full["worker_mode"] == "thread"
    assert full["storage_options"] and full["cache_limit"] == 10**9
    assert "image_size" not in preset and preset["transform"] is not None  # its own size


def test_bad_compare_is_one_line_error(uneven_dataset: Path) -> None:
    r = run_cli("stream-bench", str(uneven_dataset), "--compare", "litdata", check=False)
    assert r.returncode != 0 and "imagefolder=PATH, webdataset, webdataset-fast" in r.stderr


def test_ctrl_c_prints_what_was_measured(uneven_dataset: Path, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO

    out = tmp_path / "partial.json"
    cmd = [
        sys.executable,
        "-m",
        "wdstool",
        "stream-bench",
        str(uneven_dataset),
        "--workers",
        "1",
        "--batch-size",
        "4",
        "--image-size",
        "32",
        "--epochs",
        "100000",
        "--repeats",
        "1",
        "-q",
        "--json",
        str(out),
    ]
    # output to files, not pipes: a pipe is read only after the interrupt, and a process of the
    # group that outlives the main one (a worker ignoring SIGINT) would hold it open
    out_log, err_log = (tmp_path / "stdout.txt").open("w"), (tmp_path / "stderr.txt").open("w")
    # Ctrl-C's default action in the child whatever this process inherited: a CI harness that
    # starts the suite as a background job without job control runs it with SIGINT ignored
    # (bash does that to asynchronous commands), which Python then never turns into
    # KeyboardInterrupt, and stream-bench would run on
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=out_log,
        stderr=err_log,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # one run of many epochs is under way once its DataLoader worker exists (then a few more
    # seconds of batches); a loaded machine may take long to import torch and start it
    deadline = time.monotonic() + 120
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    while time.monotonic() < deadline and proc.poll() is None:
        if children.exists() and children.read_text().split():
            break
        time.sleep(0.2)
    time.sleep(3)
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:  # say where it stands before it is killed
        group = subprocess.run(
            ["ps", "-o", "pid,ppid,stat,wchan:32,etime,args", "-g", str(proc.pid)],
            capture_output=True,
            text=True,
        ).stdout
        tail = (tmp_path / "stderr.txt").read_text()[-2000:]
        ignored = next(
            (
                ln
                for ln in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                if ln.startswith("SigIgn")
            ),
            "",
        )
        pytest.fail(
            f"no exit within 60 s of SIGINT ({ignored}); its process group:\n{group}\n"
            f"stderr:\n{tail}"
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        out_log.close()
        err_log.close()
    stdout, stderr = ((tmp_path / n).read_text() for n in ("stdout.txt", "stderr.txt"))
    assert proc.returncode == 0, stderr[-2000:]
    assert "(interrupted" in stdout and "wdstool" in stdout
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and len(report["runs"]) == 1
    assert report["runs"][0]["interrupted"] and report["runs"][0]["batches"] > 10


@pytest.mark.full
def test_compare_exact_eval_and_exact_decode(tmp_path: Path) -> None:
    """--compare exact runs the loader with the scaled decode off, interleaved (a ratio per
    pair); --eval measures the eval transform; --exact-decode switches the scaled decode off;
    --eval with a train-only baseline, or exact against exact, is a one-line error."""
    from shard_writer.pack import PackOptions, pack
    from shard_writer.sample_data import generate_sample_data

    generate_sample_data(tmp_path / "src", images=8, classes=2, workers=1, size=(300, 260))
    pack(str(tmp_path / "src"), str(tmp_path / "shards"), PackOptions(workers=1))
    common = ["--workers", "0", "--batch-size", "4", "--image-size", "32", "--repeats", "2", "-q"]
    for extra in ([], ["--eval"]):
        out = tmp_path / f"bench{len(extra)}.json"
        r = run_cli(
            "stream-bench", str(tmp_path / "shards"), "--compare", "exact", "--json", str(out),
            *common, *extra,
        )  # fmt: skip
        report = json.loads(out.read_text())
        assert [x["name"] for x in report["runs"]] == ["wdstool", "wdstool-exact"] * 2
        assert report["ratios"]["wdstool/wdstool-exact"]["pairs"] == 2
        assert report["config"]["train"] is not bool(extra) and report["config"]["exact"]
        assert "wdstool/wdstool-exact" in r.stdout
        from wdstool.format.decode import PARTIAL_DECODE

        if PARTIAL_DECODE:
            assert report["scaled_decode"] and "scaled for large regions" in r.stdout
    out = tmp_path / "exact.json"
    run_cli("stream-bench", str(tmp_path / "shards"), "--exact-decode", "--json", str(out), *common)
    assert json.loads(out.read_text())["scaled_decode"] is False
    for bad in (["--eval", "--compare", "webdataset"], ["--exact-decode", "--compare", "exact"]):
        proc = run_cli("stream-bench", str(tmp_path / "shards"), *common, *bad, check=False)
        assert proc.returncode != 0 and proc.stderr.startswith("Error:"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
