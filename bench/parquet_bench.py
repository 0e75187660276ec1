"""Parquet read in place against the peers that stream it and against the same rows in tars (issue 45).

    python bench/parquet_bench.py [DATA] [--rows 2000] [--rounds 3] [--workers 2] [--batch 16]
        [--litdata-python PY] [--out bench/results/parquet.md]

DATA (default bench/data) holds ``images/`` (the JPEGs of ``make bench``, class folders). Written
once into ``DATA/parquet/``: a Hub-layout split of ``--rows`` of them, by ``datasets`` itself
(``Dataset.to_parquet``, ``Image`` + ``ClassLabel`` features, row groups of 100 rows, files of
500 rows: ``data/train-0000K-of-0000N.parquet``), and the same rows under the same keys in
tar shards of 100 samples (``tars/``). The recipe everywhere: RandomResizedCrop(224) + flip
(torchvision v2) on the decoded uint8 image, batches of ``--batch``, ``--workers`` DataLoader
workers. Pipelines, each two epochs in a fresh process (imports done before the clock starts):
the time from building the loader to its first batch, and the rate of the second epoch whole
(the speed a training run sees; workers restarted where the pipeline restarts them):

- ``wdstool-parquet``: ``make_loader("DATA/parquet/data#train", transform=...)``, on disk;
- ``wdstool-tars``: ``make_loader(tars pattern)`` over the same rows, on disk;
- ``hf-streaming``: ``datasets.load_dataset("parquet", data_files=..., streaming=True)`` with
  ``.map`` of the transform on its decoded PIL image, through ``torch.utils.data.DataLoader``
  (the file shards split across workers, as ``datasets`` does);
- ``litdata-parquet`` (with ``--litdata-python``, a Python where litdata imports):
  ``index_parquet_dataset`` once, then ``StreamingDataset(item_loader=ParquetLoader())`` +
  ``StreamingDataLoader``, images decoded with ``torchvision.io.decode_image``;
- ``*-http``: the same over a loopback HTTP server (tests/support/webserver.py: Range, ETag,
  ``sendfile``), Parquet as ``hf://datasets/...`` (``HF_ENDPOINT``), tars as an http brace
  pattern, HF streaming's ``data_files`` as http URLs.

Rounds interleave the pipelines after one untimed warm round; ratios are medians of the
per-round ratios, both sides from the same round.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GROUP, PER_FILE, PER_SHARD = 100, 500, 100
PIPELINES = (
    "wdstool-parquet",
    "wdstool-tars",
    "hf-streaming",
    "litdata-parquet",
    "wdstool-parquet-http",
    "wdstool-tars-http",
    "hf-streaming-http",
)
DATA_VERSION = 1


# --- the data set ------------------------------------------------------------------------------
def prepare(data: Path, rows: int) -> Path:
    out = data / "parquet"
    stamp = out / f".done-{DATA_VERSION}-{rows}"
    if stamp.exists():
        return out
    import shutil

    import datasets

    shutil.rmtree(out, ignore_errors=True)  # another size's files would join the glob
    files = sorted((data / "images").rglob("*.jpg"))
    step = max(1, len(files) // rows)
    files = files[::step][:rows]
    classes = sorted({f.parent.name for f in files})
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)}
    )
    (out / "data").mkdir(parents=True, exist_ok=True)
    (out / "tars").mkdir(parents=True, exist_ok=True)
    nfiles = (len(files) + PER_FILE - 1) // PER_FILE
    keyed = []
    for k in range(nfiles):
        part = files[k * PER_FILE : (k + 1) * PER_FILE]
        name = f"train-{k:05d}-of-{nfiles:05d}"
        datasets.Dataset.from_dict(
            {
                "image": [{"bytes": f.read_bytes(), "path": None} for f in part],
                "label": [classes.index(f.parent.name) for f in part],
            },
            features=features,
        ).to_parquet(str(out / "data" / f"{name}.parquet"), batch_size=GROUP)
        keyed += [(f"{name}-{i:06d}", f) for i, f in enumerate(part)]
    for s in range(0, len(keyed), PER_SHARD):
        with tarfile.open(out / "tars" / f"shard-{s // PER_SHARD:05d}.tar", "w") as tf:
            for key, f in keyed[s : s + PER_SHARD]:
                for ext, body in (
                    ("jpg", f.read_bytes()),
                    ("cls", b"%d" % classes.index(f.parent.name)),
                ):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(body)
                    tf.addfile(info, io.BytesIO(body))
    stamp.touch()
    return out


def _shards(out: Path) -> int:
    return len(list((out / "tars").glob("shard-*.tar")))


# --- one pipeline, one pass, in this process --------------------------------------------------
def _v2(size: int = 224):
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()])


def _timed(epochs: Any, t0: float) -> dict[str, Any]:
    """Drive ``epochs`` (a callable: epoch -> iterable of batches) for two epochs: the time
    from ``t0`` (before the loader was built) to the first batch, epoch 0's rate after it,
    epoch 1's rate over all of it (its workers' start included where they restart)."""
    first = rate0 = rate1 = 0.0
    images = 0
    for epoch in range(2):
        n, start = 0, time.perf_counter()
        for i, b in enumerate(epochs(epoch)):
            n += len(b["label"] if "label" in b else b["labels"])
            if epoch == 0 and i == 0:
                first, start, n = time.perf_counter() - t0, time.perf_counter(), 0
        rate = n / (time.perf_counter() - start)
        rate0, rate1 = (rate, rate1) if epoch == 0 else (rate0, rate)
        images = max(images, n)
    return {"first_batch_s": first, "epoch0": rate0, "epoch1": rate1, "images": images}


def run_one(pipe: str, out: Path, base: str, workers: int, batch: int) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    import torch  # imported before the clock starts, by every pipeline alike

    if pipe.startswith("wdstool"):
        from loaders import make_loader

        if "parquet" in pipe:
            src = "hf://datasets/bench/pets#train" if base else f"{out}/data/train-*.parquet"
        else:
            last = _shards(out) - 1
            root = base or str(out)
            src = f"{root}/tars/shard-{{00000..{last:05d}}}.tar"
        t0 = time.perf_counter()
        loader = make_loader(src, batch, transform=_v2(), num_workers=workers, seed=0)

        def epochs(e: int) -> Any:
            loader.set_epoch(e)
            return loader

    elif pipe.startswith("hf-streaming"):
        import datasets
        from torchvision.transforms import v2

        names = sorted(p.name for p in (out / "data").glob("*.parquet"))
        files = [f"{base}/data/{p}" if base else str(out / "data" / p) for p in names]
        tf = v2.Compose([v2.PILToTensor(), _v2()])

        def apply(ex: dict[str, Any]) -> dict[str, Any]:
            return {"pixel_values": tf(ex["image"].convert("RGB")), "label": ex["label"]}

        t0 = time.perf_counter()
        ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
        ds = ds.shuffle(seed=0, buffer_size=1000).map(apply, remove_columns=["image"])
        dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)

        def epochs(e: int) -> Any:
            ds.set_epoch(e)
            return dl

    elif pipe == "litdata-parquet":
        from litdata import StreamingDataLoader, StreamingDataset
        from litdata.streaming.item_loader import ParquetLoader

        t0 = time.perf_counter()
        ds = StreamingDataset(
            str(out / "data"), item_loader=ParquetLoader(), shuffle=True, transform=LitRow()
        )
        dl = StreamingDataLoader(  # polars' threads deadlock in forked workers (litData#823)
            ds, batch_size=batch, num_workers=workers, multiprocessing_context="spawn"
        )

        def epochs(e: int) -> Any:
            return dl

    else:
        raise SystemExit(f"unknown pipeline {pipe}")
    return {"pipe": pipe, **_timed(epochs, t0)}


class LitRow:
    """litdata's row (a dict of the Parquet columns) -> decoded, transformed; at module level:
    its workers are spawned."""

    tf: Any = None

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        import torch
        from torchvision.io import ImageReadMode, decode_image

        if self.tf is None:
            self.tf = _v2()
        img = row["image"]
        data = img["bytes"] if isinstance(img, dict) else img
        x = decode_image(
            torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB
        )
        return {"pixel_values": self.tf(x), "label": row["label"]}


def _litdata_index(py: str, out: Path) -> None:
    code = (
        "import sys; from litdata import index_parquet_dataset; index_parquet_dataset(sys.argv[1])"
    )
    if not (out / "data" / "index.json").exists():
        subprocess.run([py, "-c", code, str(out / "data")], check=True)


# --- rounds --------------------------------------------------------------------------------------
def _child(py: str, pipe: str, out: Path, base: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [py, str(Path(__file__).resolve()), "one", pipe, str(out), base or "-",
           str(args.workers), str(args.batch)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if base and pipe.startswith("wdstool"):  # datasets would ask this "Hub" for its API
        env["HF_ENDPOINT"] = base
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        return {"pipe": pipe, "error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        pipe, out, base, workers, batch = sys.argv[2:7]
        res = run_one(pipe, Path(out), "" if base == "-" else base, int(workers), int(batch))
        print(json.dumps(res))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", nargs="?", type=Path, default=HERE / "data")
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--litdata-python", default=None)
    ap.add_argument("--pipelines", default=",".join(PIPELINES))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "parquet.md")
    args = ap.parse_args()
    out = prepare(args.data, args.rows).resolve()
    pipes = [p for p in args.pipelines.split(",") if p]
    if args.litdata_python is None:
        pipes = [p for p in pipes if not p.startswith("litdata")]
    elif "litdata-parquet" in pipes:
        _litdata_index(args.litdata_python, out)
    sys.path.insert(0, str(REPO))
    from tests.support.webserver import WebServer

    results: dict[str, list[float]] = {p: [] for p in pipes}
    firsts: dict[str, list[float]] = {p: [] for p in pipes}
    errors: dict[str, Any] = {}
    with WebServer(out) as srv:
        for r in range(args.rounds + 1):
            for pipe in pipes:
                py = args.litdata_python if pipe.startswith("litdata") else sys.executable
                base = srv.url if pipe.endswith("-http") else ""
                res = _child(py, pipe, out, base, args)
                if "error" in res:
                    errors[pipe] = res["error"]
                    continue
                print(
                    f"round {r} {pipe}: {res['images']} images, first batch after "
                    f"{res['first_batch_s']:.2f} s, epoch 0 {res['epoch0']:.0f} img/s, "
                    f"epoch 1 {res['epoch1']:.0f} img/s",
                    flush=True,
                )
                if r:  # round 0 warms the page cache and the per-host caches
                    results[pipe].append(res["epoch1"])
                    firsts[pipe].append(res["first_batch_s"])
    write_report(args, pipes, results, firsts, errors)


def _ratio(results: dict[str, list[float]], a: str, b: str) -> str:
    if not results.get(a) or not results.get(b):
        return "-"
    pairs = [x / y for x, y in zip(results[a], results[b], strict=False)]
    return f"{statistics.median(pairs):.2f}x"


def write_report(args, pipes, results, firsts, errors) -> None:
    lines = [
        "# Parquet in place (`python bench/parquet_bench.py`)",
        "",
        f"{args.rows} rows of `make bench`'s JPEGs, row groups of {GROUP}, files of {PER_FILE}; "
        f"RandomResizedCrop(224) + flip, batch {args.batch}, {args.workers} workers, "
        f"{args.rounds} interleaved rounds after a warm one; {os.cpu_count()} cores, "
        f"{platform.python_version()}. Speed: a whole second epoch (the first one's start-up "
        "aside, a restart of workers where a pipeline restarts them); first batch: from "
        "building the loader (imports done) to its first batch.",
        "",
        "| pipeline | epoch img/s (median) | min | max | first batch s (median) |",
        "|---|---:|---:|---:|---:|",
    ]
    for p in pipes:
        v, f = results.get(p) or [], firsts.get(p) or []
        if v:
            lines.append(
                f"| {p} | {statistics.median(v):.0f} | {min(v):.0f} | {max(v):.0f} "
                f"| {statistics.median(f):.2f} |"
            )
        else:
            lines.append(f"| {p} | failed: {' '.join(errors.get(p, ['-']))[:120]} | | | |")
    lines += ["", "| ratio (median of per-round ratios) | value |", "|---|---:|"]
    for a, b in [
        ("wdstool-parquet", "hf-streaming"),
        ("wdstool-parquet", "litdata-parquet"),
        ("wdstool-parquet", "wdstool-tars"),
        ("wdstool-parquet-http", "hf-streaming-http"),
        ("wdstool-parquet-http", "wdstool-tars-http"),
    ]:
        lines.append(f"| {a} / {b} | {_ratio(results, a, b)} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
