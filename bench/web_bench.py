"""Someone else's WebDataset over HTTP (issue 35): what the loader fetches, how fast, through an
outage.

    python bench/web_bench.py [DATA] [--shards 200] [--rounds 3] [--out bench/results/web-bench]

DATA (default bench/data) holds ``images/`` (the 10,000 JPEGs of ``make bench``); the foreign
data set is written once into ``DATA/foreign/``: 200 shards of 50 samples by upstream
webdataset's ``TarWriter`` (PAX headers and all; a caption on two samples in three). A real
HTTP/1.1 server on 127.0.0.1 serves it (tests/support/webserver.py: its own process, ``sendfile``,
Range and ETag) and counts every body byte it sends. Measured, each in fresh processes:

1. ``index``: with an index (``wdstool index PATTERN --out``): bytes fetched before the first
   batch, and per epoch (2 epochs), against the data set's size; 1 rank, 2 workers;
2. ``info``: the same with timm's ``_info.json`` beside the shards (``make_loader(PATTERN)``);
3. ``scan``: no index, 2 ranks x 2 workers (torchrun, gloo): bytes for make_loader (the
   scan) + epoch 0, and for epoch 1, against the data set's size;
4. ``speed``: samples/s over HTTP against the same shards on local disk, interleaved rounds;
5. ``outage``: the server killed for 5 s three times during an epoch: the epoch against an
   uninterrupted one (same keys, same order), samples replaced.

    python bench/web_bench.py bytes [DATA] [--epochs 2] [--out bench/results/web-bytes]

measures only what each epoch fetches (issue 43), 1 rank x 2 workers, each case in a fresh
process: timm's ``_info.json`` (no sample offsets) on 8 shards of 60 samples and on 200 of 50,
and no index on 8 of 60 (a header scan), served by tests/support/webserver.py (Range, ETag; it counts
the bytes it sends and the connections a client cuts); and 4 shards of 60 served by
``python -m http.server`` (no Range), with no index
(a header scan at make_loader) and with ``_info.json``: GETs per shard and connection resets
(``ConnectionResetError``/``BrokenPipeError`` in its log) per epoch, and what ``stats().setup``
counted for make_loader.
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

PER_SHARD = 50


def write_foreign(data: Path, shards: int, per: int = PER_SHARD) -> Path:
    """DATA/foreign (DATA/foreign-SHARDSxPER for other than PER_SHARD samples a shard):
    ``shards`` shards of ``per`` samples by upstream webdataset (once)."""
    import webdataset as wds

    out = data / ("foreign" if per == PER_SHARD else f"foreign-{shards}x{per}")
    if out.exists() and len(list(out.glob("*.tar"))) == shards:
        return out
    out.mkdir(parents=True, exist_ok=True)
    images = sorted((data / "images").rglob("*.jpg"))[: shards * per]
    classes = sorted({p.parent.name for p in images})
    for s in range(shards):
        with wds.TarWriter(str(out / f"part-{s:06d}.tar")) as sink:
            for n in range(s * per, (s + 1) * per):
                p = images[n]
                sample = {"__key__": f"{n:07d}", "jpg": p.read_bytes()}
                sample["cls"] = str(classes.index(p.parent.name)).encode()
                if n % 3:
                    sample["txt"] = f"a photo of {p.parent.name}".encode()
                sink.write(sample)
    return out


def pattern(shards: int) -> str:
    return f"part-{{000000..{shards - 1:06d}}}.tar"


def write_info(folder: Path) -> None:
    """timm's _info.json beside the shards of ``folder``: counts, no sample offsets."""
    import tarfile

    names = sorted(f.name for f in folder.glob("part-*.tar"))
    with tarfile.open(folder / names[0]) as t:  # every shard holds as many samples
        per = len({m.name.split(".", 1)[0] for m in t.getmembers() if m.isfile()})
    info = {"splits": {"train": {"name": "train", "num_samples": len(names) * per,
                                 "filenames": names, "shard_lengths": [per] * len(names)}}}  # fmt: skip
    (folder / "_info.json").write_text(json.dumps(info))


def _epochs(
    source: str, epochs: int, workers: int, url: str, sync: Any = None, **kw: Any
) -> list[dict]:
    """make_loader over ``source``, ``epochs`` epochs; the server's bytes at each step. ``sync``
    (a barrier) runs before each count, so that no rank is a step ahead of the others."""
    from loaders import make_loader

    def sent() -> int:
        if sync is not None:
            sync()
        for _ in range(60):  # the server may be down (the outage run): its counters restart
            try:
                return _tar_bytes_sent(url)
            except OSError:
                time.sleep(0.5)
        raise SystemExit(f"{url}: the server's counters cannot be read")

    steps = [{"step": "start", "sent": sent()}]
    t0 = time.perf_counter()
    loader = make_loader(source, 64, num_workers=workers, seed=0, **kw)
    steps.append({"step": "built", "sent": sent(), "s": time.perf_counter() - t0})
    for e in range(epochs):
        loader.set_epoch(e)
        n, first = 0, None
        keys: list[str] = []
        for b in loader:
            if first is None:
                first = time.perf_counter()
                steps.append(
                    {"step": f"first batch of epoch {e}", "sent": sent(), "t": time.time()}
                )
            n += len(b["keys"])
            keys += b["keys"]
        end = time.perf_counter()
        steps.append(
            {
                "step": f"epoch {e}",
                "sent": sent(),
                "samples": n,
                "samples_per_s": (n - 64) / (end - first) if first and end > first else 0.0,
                "replaced": loader.num_replaced,
                "keys": keys,
                "t": time.time(),
            }
        )
    return steps


def _tar_bytes_sent(url: str) -> int:
    """The shard bytes the server at ``url`` sent since it (re)started."""
    import urllib.request

    from tests.support.webserver import CONTROL

    with urllib.request.urlopen(url + CONTROL, timeout=30) as r:
        return sum(n for p, n in json.loads(r.read())["sent"].items() if p.endswith(".tar"))


def run_job() -> None:
    """One rank of the ``scan`` measurement (under torchrun): 2 epochs, no index."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    url, source = sys.argv[2], sys.argv[3]
    steps = _epochs(source, 2, 2, url, sync=dist.barrier)
    for s in steps:
        s.pop("keys", None)
    if dist.get_rank() == 0:
        print("STEPS " + json.dumps(steps), flush=True)
    dist.destroy_process_group()


def _spawn(args: list[str], env: dict[str, str] | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    out = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("data", type=Path, nargs="?", default=Path("bench/data"))
    p.add_argument("--shards", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    from tests.support.webserver import WebServer

    foreign = write_foreign(args.data, args.shards)
    size = sum(f.stat().st_size for f in foreign.glob("*.tar"))
    pat = pattern(args.shards)
    report: dict[str, Any] = {"shards": args.shards, "bytes": size}
    lines = [
        f"# `python bench/web_bench.py {args.data} --shards {args.shards} --rounds {args.rounds}`",
        "",
        f"{args.shards} shards of {PER_SHARD} samples written by upstream webdataset "
        f"({size / 1e6:,.0f} MB), served on 127.0.0.1 by a real HTTP/1.1 server (its own "
        "process, sendfile, Range, ETag); bytes are what the server sent.",
        "",
    ]
    with WebServer(foreign) as srv:
        # 1. with an index written once by `wdstool index`
        index = foreign / "index-of-part.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "wdstool",
                "index",
                f"{srv.url}/{pat}",
                "--out",
                str(index),
                "-q",
            ],
            check=True,
            cwd=REPO,
        )
        for name, source in (("index", str(index)), ("info", None)):
            if source is None:  # timm's _info.json beside the shards
                write_info(foreign)
                source = f"{srv.url}/{pat}"
            steps = _spawn(["epochs", srv.url, source, "2"])
            (foreign / "_info.json").unlink(missing_ok=True)
            base = steps[0]["sent"]
            built, first = steps[1]["sent"] - base, steps[2]["sent"] - base
            e0 = steps[3]["sent"] - steps[1]["sent"]
            e1 = steps[5]["sent"] - steps[3]["sent"]
            report[name] = {"built": built, "first_batch": first, "epoch0": e0, "epoch1": e1}
            lines.append(
                f"- **{name}** ({'wdstool index --out' if name == 'index' else 'timm _info.json'}"
                f", 1 rank x 2 workers): fetched by make_loader {built / 1e6:.2f} MB, by the first "
                f"batch {first / 1e6:.1f} MB ({first / size:.3f} of the data); epoch 0 "
                f"{e0 / size:.3f}x the data, epoch 1 {e1 / size:.3f}x"
            )
        # 3. no index, 2 ranks x 2 workers
        srv_url = srv.url
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
               "--master_addr=127.0.0.1", "--master_port=29571", str(Path(__file__).resolve()),
               "job", srv_url, f"{srv_url}/{pat}"]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
        found = [line for line in out.stdout.splitlines() if line.startswith("STEPS ")]
        if out.returncode != 0 or not found:
            raise SystemExit(f"scan job failed:\n{out.stderr[-3000:]}")
        steps = json.loads(found[-1][len("STEPS ") :])
        base = steps[0]["sent"]
        scan_e0 = steps[3]["sent"] - base
        e1 = steps[5]["sent"] - steps[3]["sent"]
        report["scan"] = {
            "scan_and_epoch0": scan_e0,
            "epoch1": e1,
            "built": steps[1]["sent"] - base,
        }
        lines.append(
            f"- **no index** (2 ranks x 2 workers, torchrun): scan + epoch 0 {scan_e0 / size:.3f}x "
            f"the data (the scan alone {report['scan']['built'] / size:.3f}x), epoch 1 "
            f"{e1 / size:.3f}x"
        )
        # 4. speed, HTTP against local disk
        rates: dict[str, list[float]] = {"http": [], "local": []}
        for r in range(args.rounds):
            order = ("http", "local") if r % 2 == 0 else ("local", "http")
            for which in order:
                source = str(index) if which == "http" else str(foreign / pat)
                steps = _spawn(["epochs", srv.url, source, "1"])
                rates[which].append(steps[-1]["samples_per_s"])
        ratios = [h / lo for h, lo in zip(rates["http"], rates["local"], strict=True)]
        report["speed"] = {"rates": rates, "ratios": ratios}
        lines.append(
            f"- **speed** ({args.rounds} interleaved rounds, 2 workers, 224 px): HTTP "
            f"{statistics.median(rates['http']):,.0f} samples/s, local disk "
            f"{statistics.median(rates['local']):,.0f}: **{statistics.median(ratios):.2f}x** "
            f"(range {min(ratios):.2f}-{max(ratios):.2f})"
        )
        # 5. outage: the server killed for 5 s three times during an epoch
        reference = _spawn(["epochs", srv.url, str(index), "1"])[-1]["keys"]
        got: dict[str, Any] = {}

        def run() -> None:
            steps = _spawn(["epochs", srv.url, str(index), "1", "skip"])
            got.update(steps[-1], first_t=steps[-2]["t"])

        before = _tar_bytes_sent(srv.url)
        worker = threading.Thread(target=run)
        worker.start()
        outages = []
        # the first outage once the loader reads (torch imported, loader built): 64 samples' bytes
        sample_bytes = size / (args.shards * PER_SHARD)
        deadline = time.time() + 120
        while _tar_bytes_sent(srv.url) - before < 64 * sample_bytes and time.time() < deadline:
            time.sleep(0.1)
        for _ in range(3):
            time.sleep(1)
            srv.stop()
            t = time.time()
            time.sleep(5)
            srv.start()
            outages.append((t, time.time()))
        worker.join()
        same = got.get("keys") == reference
        # an outage counts only where it lies between the epoch's first batch and its end
        inside = sum(got["first_t"] < a and b < got["t"] for a, b in outages)
        lengths = [b - a for a, b in outages]
        report["outage"] = {
            "outages_s": lengths,
            "inside_epoch": inside,
            "same_epoch": same,
            "replaced": got.get("replaced"),
        }
        lines.append(
            f"- **outage** (server killed for {statistics.mean(lengths):.1f} s, 3 times; "
            f"{inside} of them between the epoch's first batch and its end): the same epoch as "
            f"without: **{same}**; samples replaced: **{got.get('replaced')}**"
        )
    print("\n".join(lines))
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(report, indent=1))
        Path(args.out + ".md").write_text("\n".join(lines) + "\n")


def run_epochs() -> None:
    url, source, epochs = sys.argv[2], sys.argv[3], int(sys.argv[4])
    kw = {"on_error": "skip"} if sys.argv[5:] == ["skip"] else {}
    print(json.dumps(_epochs(source, epochs, 2, url, **kw)))


if __name__ == "__main__":
    if sys.argv[1:2] == ["job"]:
        run_job()
    elif sys.argv[1:2] == ["epochs"]:
        run_epochs()
    elif sys.argv[1:2] in (["bytes"], ["bytes-case"]):
        from web_bytes import bytes_case, bytes_main

        bytes_case() if sys.argv[1] == "bytes-case" else bytes_main(sys.argv[2:])
    else:
        main()
