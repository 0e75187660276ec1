"""What saving the loader's state costs, at step 10^5 of a 10^8-sample epoch.

A manifest of 100,000 shards x 1,000 samples (no shard exists: none is opened), rank 3 of 8,
batch 64, 8 workers (195,313 batches per rank and epoch). The loader's counter of delivered
batches is set to 10 and to 10^5, as iterating would leave it, and ``state_dict()`` is timed
(median and max of the repeats); then a fresh loader loads the step-10^5 state (planning the
rest of the epoch, once) and ``state_dict()`` is timed again inside the resumed epoch.

    python bench/state_bench.py [--repeats 1000] [--json FILE]

Keeping the state while training costs one integer increment per batch; nothing is
snapshotted per step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from loaders import make_loader

SHARDS, PER_SHARD, WORLD, RANK, BATCH, WORKERS = 100_000, 1_000, 8, 3, 64, 8


def write_manifest(folder: Path) -> Path:
    shards = [
        {"url": f"train-{i:06d}.tar", "nsamples": PER_SHARD, "filesize": 10**8, "sha256": ""}
        for i in range(SHARDS)
    ]
    manifest = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": shards}
    (folder / "index.json").write_text(json.dumps(manifest))
    return folder


def timed(fn, repeats: int) -> tuple[float, float]:
    """Median and max seconds of ``fn()`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), max(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1000)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    warnings.simplefilter("ignore")  # torch: 8 workers exceed this machine's cores
    out: dict = {"shards": SHARDS, "samples": SHARDS * PER_SHARD, "world_size": WORLD}
    with tempfile.TemporaryDirectory() as tmp:
        data = write_manifest(Path(tmp))

        def loader():
            return make_loader(data, BATCH, num_workers=WORKERS, rank=RANK, world_size=WORLD)

        fresh = loader()
        out["batches_per_epoch"] = len(fresh)
        for step in (10, 10**5):
            fresh.batches_delivered = step  # what iterating `step` batches leaves
            med, worst = timed(fresh.state_dict, args.repeats)
            out[f"state_dict_at_{step}"] = {"median_us": med * 1e6, "max_us": worst * 1e6}
        state = json.loads(json.dumps(fresh.state_dict()))
        out["state_bytes"] = len(json.dumps(state))
        resumed = loader()
        t0 = time.perf_counter()
        resumed.load_state_dict(state)
        out["load_state_dict_s"] = time.perf_counter() - t0
        resumed.batches_delivered = 10
        med, worst = timed(resumed.state_dict, args.repeats)
        out["state_dict_resumed_at_100010"] = {"median_us": med * 1e6, "max_us": worst * 1e6}
        assert resumed.state_dict()["batches"] == 10**5 + 10
    for key, value in out.items():
        print(f"{key:32s} {value}")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
