"""Watching the loader (issue 36): what the stats cost, whether they tell the truth, whether the
verdict names the bottleneck, and whether ``"auto"`` finds the best worker settings.

    python bench/monitor_bench.py [DATA] [--rounds 5] [--out bench/results/monitor-bench]
        [--only overhead,truth,verdicts,autotune]

DATA (default bench/data) holds ``shards/`` (the 10,000 JPEGs of ``make bench``). Every run is
a fresh process (``_one``); nothing else should run meanwhile. Measured:

1. ``overhead``: ``make_loader(stats=True)`` against ``stats=False``, 2 worker processes and 2
   decode threads, batch 64, RRC 224 + flip, one epoch of 5,000 samples per run, the two
   interleaved (the order alternating) for ``--rounds`` rounds; img/s after the first batch;
   the median of the per-round ratios;
2. ``truth``: one full epoch: the stats' bytes read against the shards' bytes, the stats' wait
   against what the loop measured around ``next()`` itself;
3. ``verdicts``: constructed bottlenecks, 2,000 samples each: shards served at 15 MB/s by a
   real HTTP server on 127.0.0.1 (storage), a recipe with a 23-px Gaussian blur (tail), 1
   worker on 2 cores (too few workers), 2 workers (decode), and a 150 ms step (not
   input-bound); the loader's verdict on each;
4. ``autotune``: an input-bound job (a 25 ms step per batch of 64: the loop could take 2,560
   img/s), 2 epochs of 3,000 samples: a sweep of fixed (workers 1-4 x prefetch 2, 4) against
   ``num_workers="auto", prefetch_factor="auto"``, worker processes and decode threads,
   ``--rounds`` rounds (at most 3); the first epoch's img/s; the process tree's owned memory
   (anonymous + shared PSS) sampled every 0.5 s in every run, against the budget; and "auto"
   under a tight budget (this process + 1.5 workers);
5. ``duel`` (not in the default set): "auto" against the sweep's leading fixed settings
   only, interleaved, ``--rounds`` rounds: the medians say more than a sweep's 3 rounds on a
   machine whose runs vary by 20%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))


def _one(cfg: dict[str, Any]) -> dict[str, Any]:
    """One run in this (fresh) process: ``cfg`` as the modes below build it."""
    import torch
    from torchvision.transforms import v2

    from loaders import make_loader
    from loaders.monitor.memory import tree_memory

    torch.set_num_threads(1)
    # the loader settings a mode gives, by make_loader's names; the others at its defaults
    names = {
        "prefetch": "prefetch_factor",
        "mode": "worker_mode",
        "stats": "stats",
        "epoch_size": "epoch_size",
        "budget": "memory_budget",
    }
    kw: dict[str, Any] = {names[k]: v for k, v in cfg.items() if k in names}
    kw.update(num_workers=cfg.get("workers", 2), seed=0)
    if cfg.get("recipe") == "blur":
        kw["transform"] = v2.Compose(
            [v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.GaussianBlur(23, 5.0)]
        )
    else:
        kw["image_size"] = 224
    server = None
    source = cfg["source"]
    if cfg.get("rate"):
        from tests.support.webserver import WebServer

        server = WebServer(Path(source).parent, rate=cfg["rate"])
        source = f"{server.url}/{Path(source).name}"
    loader = make_loader(source, 64, **kw)
    loader.exporters.clear()  # no log lines in the timed loop
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            peak[0] = max(peak[0], tree_memory(loader.pids()).owned)

    sampler = threading.Thread(target=sample, daemon=True)
    if cfg.get("memory"):
        sampler.start()
    step = cfg.get("step_ms", 0) / 1000
    epochs = []
    for e in range(cfg.get("epochs", 1)):
        loader.set_epoch(e)
        it = iter(loader)
        t0 = time.perf_counter()
        first = next(it)
        t1 = time.perf_counter()
        samples, waited = 0, t1 - t0
        del first
        if step:
            time.sleep(step)
        while True:
            a = time.perf_counter()
            batch = next(it, None)
            waited += time.perf_counter() - a
            if batch is None:
                break
            samples += len(batch["keys"])
            del batch
            if step:
                time.sleep(step)
        end = time.perf_counter()
        out: dict[str, Any] = {
            "samples_per_s": samples / (end - t1),
            "first_batch_s": t1 - t0,
            "loop_wait_s": waited,
            "workers": loader.topology.num_workers,
            "prefetch": loader.config.workers.prefetch_factor,
        }
        if loader.meter is not None:
            s = loader.stats()
            out["stats"] = s.as_dict()
            verdict = loader.diagnose("epoch")
            out["verdict"], out["cause"] = str(verdict), verdict.cause
            out["active"] = s.workers
        epochs.append(out)
    stop.set()
    if sampler.is_alive():
        sampler.join()
    result: dict[str, Any] = {"cfg": cfg, "epochs": epochs, "peak_owned": peak[0]}
    if loader.autotuner is not None:
        result["changes"] = loader.autotuner.changes
        result["budget"] = loader.autotuner.spec.budget
    if server is not None:
        server.close()
    return result


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    """``_one(cfg)`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, __file__, "_one", json.dumps(cfg)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if proc.returncode:
        raise SystemExit(f"run {cfg} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def overhead(shards: Path, rounds: int, log: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("process", "thread"):
        pairs = []
        for r in range(rounds):
            got = {}
            for on in (True, False) if r % 2 == 0 else (False, True):
                cfg = dict(source=str(shards), workers=2, mode=mode, stats=on, epoch_size=5000)
                got[on] = run(cfg)["epochs"][0]["samples_per_s"]
            pairs.append((got[True], got[False]))
            log.append(f"overhead {mode} round {r}: on {got[True]:.0f} off {got[False]:.0f} img/s")
            print(log[-1], flush=True)
        ratios = [a / b for a, b in pairs]
        out[mode] = {
            "on": [a for a, _ in pairs],
            "off": [b for _, b in pairs],
            "ratio_median": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
        }
        log.append(
            f"overhead {mode}: on/off median {statistics.median(ratios):.3f} "
            f"(range {min(ratios):.3f}-{max(ratios):.3f}, {rounds} rounds)"
        )
        print(log[-1], flush=True)
    return out


def truth(shards: Path, log: list[str]) -> dict[str, Any]:
    res = run(dict(source=str(shards), workers=2))["epochs"][0]
    e = res["stats"]["epoch_so_far"]
    data = sum(p.stat().st_size for p in shards.glob("*.tar"))
    out = {
        "shard_bytes": data,
        "bytes_read": e["bytes_read"],
        "bytes_ratio": e["bytes_read"] / data,
        "loop_wait_s": res["loop_wait_s"],
        "stats_wait_s": e["wait_s"],
        "wait_ratio": e["wait_s"] / res["loop_wait_s"],
    }
    log.append(
        f"truth: bytes read {e['bytes_read']:,} of {data:,} shard bytes ({out['bytes_ratio']:.5f}); "
        f"wait {e['wait_s']:.3f} s vs the loop's {res['loop_wait_s']:.3f} s "
        f"({out['wait_ratio']:.4f})"
    )
    print(log[-1], flush=True)
    return out


SCENARIOS = {
    "storage (15 MB/s server)": (dict(workers=2, rate=15e6), "storage"),
    "slow recipe (GaussianBlur 23 px)": (dict(workers=2, recipe="blur"), "tail"),
    "too few workers (1 of 2 cores)": (dict(workers=1), "workers"),
    "decode at every core (2 workers)": (dict(workers=2), "decode"),
    "slow step (150 ms per batch)": (dict(workers=2, step_ms=150), "not-input-bound"),
}


def verdicts(shards: Path, log: list[str]) -> dict[str, Any]:
    out = {}
    for name, (cfg, expect) in SCENARIOS.items():
        res = run(dict(source=str(shards), epoch_size=2000, **cfg))["epochs"][0]
        cause = res["cause"]
        out[name] = {
            "verdict": res["verdict"],
            "cause": cause,
            "expected": expect,
            "right": cause == expect,
            "samples_per_s": res["samples_per_s"],
        }
        log.append(f"verdict, {name}: [{'right' if cause == expect else 'WRONG'}] {res['verdict']}")
        print(log[-1], flush=True)
    right = sum(v["right"] for v in out.values())
    log.append(f"verdicts right: {right} of {len(out)}")
    print(log[-1], flush=True)
    return out


def autotune(
    shards: Path, rounds: int, log: list[str], modes: tuple[str, ...] = ("process", "thread")
) -> dict[str, Any]:
    base = dict(source=str(shards), epoch_size=3000, epochs=2, step_ms=25, memory=True)
    out: dict[str, Any] = {}
    for mode in modes:
        fixed: dict[str, list[float]] = {}
        fixed2: dict[str, list[float]] = {}
        auto: list[dict[str, Any]] = []
        for r in range(rounds):
            for w in (1, 2, 3, 4):
                for p in (2, 4):
                    res = run(dict(base, mode=mode, workers=w, prefetch=p))
                    fixed.setdefault(f"{w}x{p}", []).append(res["epochs"][0]["samples_per_s"])
                    fixed2.setdefault(f"{w}x{p}", []).append(res["epochs"][1]["samples_per_s"])
            res = run(dict(base, mode=mode, workers="auto", prefetch="auto"))
            auto.append(res)
            log.append(
                f"autotune {mode} round {r}: auto {res['epochs'][0]['samples_per_s']:.0f} img/s "
                f"(epoch 1: {res['epochs'][1]['samples_per_s']:.0f}), peak owned "
                f"{res['peak_owned'] / 1e6:.0f} MB of {res['budget'] / 1e6:.0f} MB, changes "
                f"{res.get('changes')}; fixed "
                + ", ".join(f"{k} {v[-1]:.0f}" for k, v in fixed.items())
            )
            print(log[-1], flush=True)
        best_key = max(fixed, key=lambda k: statistics.median(fixed[k]))
        best = statistics.median(fixed[best_key])
        best2_key = max(fixed2, key=lambda k: statistics.median(fixed2[k]))
        best2 = statistics.median(fixed2[best2_key])
        first = statistics.median(a["epochs"][0]["samples_per_s"] for a in auto)
        second = statistics.median(a["epochs"][1]["samples_per_s"] for a in auto)
        tight = run(dict(base, mode=mode, workers="auto", prefetch="auto", budget=_tight()))
        out[mode] = {
            "fixed_median": {k: statistics.median(v) for k, v in fixed.items()},
            "fixed_median_second_epoch": {k: statistics.median(v) for k, v in fixed2.items()},
            "best_fixed": best_key,
            "best_fixed_second_epoch": best2_key,
            "auto_first_epoch": first,
            "auto_second_epoch": second,
            "auto_over_best_first_epoch": first / best,
            "auto_over_best_second_epoch": second / best2,
            "auto_workers": [[e.get("active", e["workers"]) for e in a["epochs"]] for a in auto],
            "auto_peak_owned": max(a["peak_owned"] for a in auto),
            "budget": auto[0]["budget"],
            "tight": {
                "budget": tight["budget"],
                "peak_owned": tight["peak_owned"],
                "workers": [e["workers"] for e in tight["epochs"]],
                "samples_per_s": [e["samples_per_s"] for e in tight["epochs"]],
                "changes": tight.get("changes"),
            },
        }
        log.append(
            f"autotune {mode}: auto/best fixed, first epoch {first / best:.3f} ({first:.0f} vs "
            f"{best_key} {best:.0f} img/s), second {second / best2:.3f} ({second:.0f} vs "
            f"{best2_key} {best2:.0f}); peak owned "
            f"{out[mode]['auto_peak_owned'] / 1e6:.0f} MB (budget {auto[0]['budget'] / 1e6:.0f} MB); "
            f"tight budget {tight['budget'] / 1e6:.0f} MB: peak {tight['peak_owned'] / 1e6:.0f} MB, "
            f"workers {out[mode]['tight']['workers']}"
        )
        print(log[-1], flush=True)
    return out


DUEL = {
    "process": ("2x2", "2x4", "3x2", "3x4", "4x2"),
    "thread": ("2x2", "3x2", "3x4", "4x2", "4x4"),
}


def duel(shards: Path, rounds: int, log: list[str], modes: tuple[str, ...]) -> dict[str, Any]:
    """The sweep's leading fixed settings against "auto", interleaved (the order rotating),
    ``rounds`` rounds: the first epoch's img/s, medians per setting."""
    base = dict(source=str(shards), epoch_size=3000, epochs=2, step_ms=25)
    out: dict[str, Any] = {}
    for mode in modes:
        names = ["auto", *DUEL[mode]]
        got: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            for n in names[r % len(names) :] + names[: r % len(names)]:
                if n == "auto":
                    cfg = dict(base, mode=mode, workers="auto", prefetch="auto")
                else:
                    w, p = (int(x) for x in n.split("x"))
                    cfg = dict(base, mode=mode, workers=w, prefetch=p)
                got[n].append(run(cfg)["epochs"][0]["samples_per_s"])
            log.append(
                f"duel {mode} round {r}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in got.items())
            )
            print(log[-1], flush=True)
        med = {n: statistics.median(v) for n, v in got.items()}
        best = max(DUEL[mode], key=lambda n: med[n])
        out[mode] = {
            "runs": got,
            "median": med,
            "best_fixed": best,
            "auto_over_best": med["auto"] / med[best],
        }
        log.append(
            f"duel {mode}: auto {med['auto']:.0f} img/s, best fixed {best} {med[best]:.0f}: "
            f"{med['auto'] / med[best]:.3f} (medians of {rounds} interleaved rounds, first epoch)"
        )
        print(log[-1], flush=True)
    return out


def _tight() -> int:
    """This process's own memory as a fresh one holds it with torch loaded, + 1.5 workers."""
    from loaders.monitor.autotune import WORKER_ESTIMATE

    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import loaders; from loaders.monitor.memory import "
            "owned_memory; print(owned_memory())",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    return int(probe.stdout.strip()) + int(1.5 * WORKER_ESTIMATE)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "_one":
        print(json.dumps(_one(json.loads(sys.argv[2]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default=str(REPO / "bench" / "data"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "monitor-bench"))
    ap.add_argument("--only", default="overhead,truth,verdicts,autotune")
    ap.add_argument("--autotune-modes", default="process,thread")
    args = ap.parse_args()
    shards = Path(args.data) / "shards"
    parts = set(args.only.split(","))
    from wdstool.base.host import host_info

    log: list[str] = [f"machine: {json.dumps(host_info())}"]
    report: dict[str, Any] = {"machine": host_info(), "rounds": args.rounds}
    if "overhead" in parts:
        report["overhead"] = overhead(shards, args.rounds, log)
    if "truth" in parts:
        report["truth"] = truth(shards, log)
    if "verdicts" in parts:
        report["verdicts"] = verdicts(shards, log)
    if "autotune" in parts:
        modes = tuple(args.autotune_modes.split(","))
        report["autotune"] = autotune(shards, min(args.rounds, 3), log, modes)
    if "duel" in parts:
        modes = tuple(args.autotune_modes.split(","))
        report["duel"] = duel(shards, args.rounds, log, modes)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    out.with_suffix(".txt").write_text("\n".join(log) + "\n")


if __name__ == "__main__":
    main()
