"""Small data sets over S3 and HTTP against disk (issue 53): first batch and epoch, 1 and 8 shards.

    python bench/split_bench.py [DATA] [--images 2000] [--rounds 3] [--out bench/results/split-bench]

DATA (default bench/data) gets ``split/images`` (``wdstool sample-data``, 10 classes) packed
twice: with pack's defaults (one shard of ~210 MB for 2,000 images) and with ``--max-count 250``
(8 shards). The plan gives each worker one contiguous run of its rank's share, so workers
start and end inside shards. Each data set is read from:

- ``disk``: the local folder;
- ``s3``: moto's S3 server on 127.0.0.1 (``wdstool.base.locals3``), packed there by ``pack``;
- ``s3-no-offsets``: the same objects, its ``index.json`` without ``sample_offsets`` (a manifest
  of an older pack, or of another tool that counts samples only);
- ``http``: a loopback HTTP/1.1 server with Range (tests/support/webserver.py, ``sendfile``).

Each run is a fresh process (imports before the clock, botocore's too): ``make_loader(SOURCE, 64, image_size=224,
num_workers=W)``, one epoch of the built-in recipe (RandomResizedCrop + flip, uint8); the time
from ``make_loader`` to the first batch, the epoch from ``make_loader`` to the last batch,
samples/s over the epoch, and the requests and bytes the loader's stats counted. Rounds are
interleaved; a warm-up round (page cache, the host's kept offsets) is not reported; the ratios
to disk are taken within a round and their median is printed. The servers share the machine's
two cores with the workers (``server CPU``: the server process's CPU time during the run, taken
from decoding); moto reads the whole object for every request (~80 ms of CPU on a 200 MB shard
before the first byte; real S3 answers in 20-50 ms whatever the size).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STORES = ("disk", "s3", "s3-no-offsets", "http")


def prepare(data: Path, images: int) -> dict[int, Path]:
    """The image tree and its two packs; {shards: folder}."""
    root = data / "split"
    tree = root / f"images-{images}"
    wdstool = [sys.executable, "-m", "wdstool"]
    if not (tree / ".done").exists():
        shutil.rmtree(tree, ignore_errors=True)
        subprocess.run([*wdstool, "sample-data", str(tree), "--images", str(images),
                        "--classes", "10", "--seed", "0"], check=True)  # fmt: skip
        (tree / ".done").touch()
    out = {}
    for label, extra in (("one", []), ("eight", ["--max-count", str(-(-images // 8))])):
        dest = root / f"{label}-{images}"
        if not (dest / "index.json").exists():
            subprocess.run(
                [*wdstool, "pack", str(tree), str(dest), "--overwrite", *extra], check=True
            )
        shards = json.loads((dest / "index.json").read_text())["num_shards"]
        out[shards] = dest
    return out


def upload(s3: Any, folders: dict[int, Path]) -> dict[tuple[int, str], str]:
    """Each data set to the bucket, as pack's own copy and without its offsets."""
    client = s3.client()
    s3.make_bucket("split-bench")
    urls = {}
    for shards, folder in folders.items():
        for variant in ("s3", "s3-no-offsets"):
            prefix = f"{variant}-{shards}"
            for p in sorted(folder.iterdir()):
                body = p.read_bytes()
                if p.name == "index.json" and variant == "s3-no-offsets":
                    manifest = json.loads(body)
                    manifest.pop("sample_offsets", None)
                    body = json.dumps(manifest).encode()
                if p.name == "index.offsets.npy" and variant == "s3-no-offsets":
                    continue
                client.put_object(Bucket="split-bench", Key=f"{prefix}/{p.name}", Body=body)
            urls[(shards, variant)] = f"s3://split-bench/{prefix}"
    return urls


def run_one(source: str, workers: int) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    import botocore.session  # noqa: F401 - ~0.3 s of imports, which a job pays once
    import torch  # noqa: F401 - imported before the clock starts
    import urllib3  # noqa: F401

    from loaders import make_loader

    t0 = time.perf_counter()
    loader = make_loader(source, 64, image_size=224, num_workers=workers, seed=0)
    first, n = None, 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        n += len(batch["labels"])
    epoch = time.perf_counter() - t0
    stats = loader.stats(memory=False)
    return {
        "first_batch_s": first,
        "epoch_s": epoch,
        "samples_per_s": n / epoch,
        "samples": n,
        "requests": stats.all_epochs.requests,
        "network_bytes": stats.all_epochs.network_bytes,
    }


def _child(source: str, workers: int, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "one", source, str(workers)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        print(json.dumps(run_one(sys.argv[2], int(sys.argv[3]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", nargs="?", type=Path, default=HERE / "data")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", default="2,4")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "split-bench")
    args = ap.parse_args()
    folders = prepare(args.data, args.images)
    workers = [int(w) for w in args.workers.split(",")]
    sys.path.insert(0, str(REPO))
    import psutil

    from tests.support.webserver import WebServer
    from wdstool.base.locals3 import LocalS3

    runs: list[dict[str, Any]] = []
    with LocalS3() as s3, WebServer(folders[min(folders)].parent) as web:
        env = {**os.environ, **s3.env}
        servers = {"s3": psutil.Process(s3.pid), "http": psutil.Process(web._proc.pid)}
        urls = upload(s3, folders)
        for shards, folder in folders.items():
            urls[(shards, "disk")] = str(folder)
            urls[(shards, "http")] = f"{web.url}/{folder.name}"
        for r in range(args.rounds + 1):
            for shards in sorted(folders):
                for w in workers:
                    for store in STORES:
                        server = servers.get(store.split("-")[0])
                        cpu = sum(server.cpu_times()[:2]) if server else 0.0
                        res = _child(urls[(shards, store)], w, env)
                        res["server_cpu_s"] = (sum(server.cpu_times()[:2]) - cpu) if server else 0.0
                        res.update(round=r, shards=shards, workers=w, store=store)
                        print(json.dumps(res), flush=True)
                        if r:  # round 0 warms the page cache and the host's kept offsets
                            runs.append(res)
    write_report(args, runs)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def write_report(args: argparse.Namespace, runs: list[dict[str, Any]]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n")
    lines = [
        "# Small data sets over S3 and HTTP against disk (`python bench/split_bench.py`)",
        "",
        f"{args.images} sample JPEGs (~105 KB, ~450x380), batch 64, RandomResizedCrop 224 + flip, "
        f"uint8, one epoch per fresh process, {args.rounds} interleaved rounds after a warm-up; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores. ÷ disk: the "
        "median of the per-round ratios of samples/s (epoch from make_loader to the last batch).",
        "",
        "| shards | workers | store | samples/s | ÷ disk | first batch | epoch | requests | MB fetched | server CPU |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = sorted({(r["shards"], r["workers"]) for r in runs})
    for shards, w in keys:
        for store in STORES:
            mine = [
                r for r in runs if (r["shards"], r["workers"], r["store"]) == (shards, w, store)
            ]
            ok = [r for r in mine if "error" not in r]
            if not ok:
                err = mine[0].get("error", "not run") if mine else "not run"
                lines.append(f"| {shards} | {w} | {store} | {err} | | | | | | |")
                continue
            disk = {r["round"]: r for r in runs if (r["shards"], r["workers"], r["store"]) ==
                    (shards, w, "disk") and "error" not in r}  # fmt: skip
            ratios = [r["samples_per_s"] / disk[r["round"]]["samples_per_s"] for r in ok
                      if r["round"] in disk]  # fmt: skip
            lines.append(
                f"| {shards} | {w} | {store} | {_median([r['samples_per_s'] for r in ok]):,.0f} | "
                f"{_median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
                f"{_median([r['first_batch_s'] for r in ok]):.2f} s | "
                f"{_median([r['epoch_s'] for r in ok]):.2f} s | "
                f"{_median([r['requests'] for r in ok]):.0f} | "
                f"{_median([r['network_bytes'] for r in ok]) / 1e6:,.0f} | "
                f"{_median([r.get('server_cpu_s', 0.0) for r in ok]):.2f} s |"
            )
    text = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
