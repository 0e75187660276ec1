"""Planning at cluster scale, from manifests alone (no shard exists, none is opened):

- one source of 10^8 samples (100,000 shards x 1,000), rank 4,095 of 4,096, 8 workers;
- a mixture of 10 sources totalling the same, weights 1..3;
- an elastic resume of that mixture's 4,096-rank state on 2,048 ranks.

    python bench/plan_bench.py [--repeats 3]

Each figure is a fresh process's make_loader + len + the rank's plan: wall time (median of the
repeats) and, in a run of its own, the peak memory Python allocated (tracemalloc).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time, tracemalloc, warnings
warnings.simplefilter("ignore")
from loaders import Source, make_loader
kind, root, traced = sys.argv[1], sys.argv[2], sys.argv[-1] == "traced"
dirs = sorted(p for p in __import__("pathlib").Path(root).iterdir() if p.name.startswith("src"))
if traced:  # memory in a run of its own: tracing slows everything down several times
    tracemalloc.start()
t0 = time.perf_counter()
if kind == "single":
    loader = make_loader(str(dirs[0]), 64, num_workers=8, rank=4095, world_size=4096)
    n = len(loader); loader.dataset.plan()
else:
    sources = [Source(d, weight=1 + i % 3) for i, d in enumerate(dirs[1:])]
    if kind == "mixture":
        loader = make_loader(sources, 64, num_workers=8, rank=4095, world_size=4096)
        n = len(loader); loader.dataset.plan()
    else:
        state = json.loads(sys.argv[3])
        t0 = time.perf_counter()  # the state is given: what a resuming rank does
        loader = make_loader(sources, 64, num_workers=8, rank=2047, world_size=2048)
        loader.load_state_dict(state)
        n = len(loader); loader.dataset.plan()
elapsed = time.perf_counter() - t0
peak = tracemalloc.get_traced_memory()[1] / 1e6 if traced else 0.0
print(json.dumps({"seconds": elapsed, "peak_mb": peak, "len": n}))
"""

STATE = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from loaders import Source, make_loader
dirs = sorted(p for p in __import__("pathlib").Path(sys.argv[1]).iterdir() if p.name.startswith("src"))
sources = [Source(d, weight=1 + i % 3) for i, d in enumerate(dirs[1:])]
loader = make_loader(sources, 64, num_workers=8, rank=0, world_size=4096)
state = loader.state_dict()
state["segments"][-1]["batches"] = state["batches"] = 200
print(json.dumps(state))
"""


def manifests(root: Path) -> None:
    def write(d: Path, n: int, tag: str) -> None:
        d.mkdir()
        shards = [
            {"url": f"{tag}-{i:06d}.tar", "nsamples": 1000, "filesize": 10**8, "sha256": ""}
            for i in range(n)
        ]
        (d / "index.json").write_text(
            json.dumps({"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": shards})
        )

    write(root / "src00", 100_000, "single")
    for s in range(10):
        write(root / f"src{s + 1:02d}", 10_000, f"m{s}")


def run(args: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifests(root)
        state = (
            subprocess.run(
                [sys.executable, "-c", STATE, str(root)], capture_output=True, text=True, check=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        for kind, extra in (("single", []), ("mixture", []), ("elastic", [state])):
            runs = [run([kind, str(root), *extra, "timed"]) for _ in range(a.repeats)]
            secs = statistics.median(r["seconds"] for r in runs)
            mem = run([kind, str(root), *extra, "traced"])["peak_mb"]
            print(f"{kind:<8} make_loader + len + plan: {secs:.3f} s, peak {mem:.0f} MB "
                  f"({runs[0]['len']} batches)")  # fmt: skip


if __name__ == "__main__":
    main()
