"""``make bench-peers``: the same epoch through wdstool's loader and its peers, interleaved.

    python bench/peers/run.py [DATA] [--rounds 3] [--peers dali,spdl,...] [--recipe full]
                              [--ffcv-max-resolution N] [--out PREFIX]

DATA (default bench/data) holds ``images/`` (ImageFolder tree) and ``shards/`` (wdstool shards
with ``index.json``); peers' own formats are converted once into ``DATA/peers/`` (untimed,
cached). Then, after one untimed read of every input file (the page cache warm for all), each
round runs every peer next to a run of wdstool (``peer_wdstool.py``), each run a fresh
process, the order within a pair alternating and the peers' order rotating from round to
round. Figures are medians over rounds; the ratio is wdstool ÷ peer (samples/s) taken pair by
pair (same round, back to back), reported as median and range. A peer that cannot be imported
or run here is a skip with the reason, never a number. ``--recipe full`` gives every runner the
full training recipe (RRC bicubic + flip + TrivialAugmentWide + RandomErasing 0.25) instead of
RRC + flip (``_common.RECIPES``); each row's configuration says what that peer ran. Writes
PREFIX.json and PREFIX.md (default bench/results/peers).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from _common import RECIPES
from _report import markdown, summarize

HERE = Path(__file__).resolve().parent
PEERS = ("dali", "spdl", "litdata", "mosaic", "ffcv", "webdataset", "imagefolder")
PACKAGES = (
    "torch",
    "torchvision",
    "pillow",
    "numpy",
    "nvidia-dali-cuda120",
    "spdl",
    "litdata",
    "mosaicml-streaming",
    "ffcv",
    "webdataset",
    "psutil",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("data", nargs="?", type=Path, default=Path("bench/data"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--peers", default=",".join(PEERS), help="comma-separated subset of " + ",".join(PEERS)
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--recipe", choices=list(RECIPES), default="default", help="augmentation")
    p.add_argument(
        "--ffcv-max-resolution",
        type=int,
        default=None,
        metavar="N",
        help="FFCV's .beton with images scaled down to a longer side of at most N "
        "(default: full size)",
    )
    p.add_argument(
        "--wdstool-shards",
        default="shards",
        metavar="DIR",
        help="the folder under DATA wdstool's loader reads (e.g. shards-rm, packed with "
        "--restart-markers); every other peer reads its own format of DATA/images or DATA/shards",
    )
    p.add_argument(
        "--out", type=Path, default=Path("bench/results/peers"), help="PREFIX of .json/.md"
    )
    p.add_argument("--python", default=sys.executable, help="interpreter for the runners")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    args = p.parse_args(argv)
    unknown = sorted(set(args.peers.split(",")) - set(PEERS))
    if unknown:
        p.error(f"--peers: unknown {', '.join(unknown)} (known: {', '.join(PEERS)})")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if not (args.data / "shards" / "index.json").is_file() or not (args.data / "images").is_dir():
        p.error(
            f"{args.data}: needs images/ and shards/index.json (`make bench-peers` makes bench/data)"
        )
    return args


def call(args: argparse.Namespace, peer: str, action: str, seed: int = 0) -> dict[str, Any]:
    """Run one runner in a fresh process; its last stdout line is its JSON answer. A failure
    comes back as ``{"error": ...}`` with the last line of its stderr."""
    cmd = [args.python, str(HERE / f"peer_{peer}.py"), action, str(args.data.resolve())]
    cmd += ["--workers", str(args.workers), "--batch-size", str(args.batch_size)]
    cmd += ["--image-size", str(args.image_size), "--seed", str(seed), "--recipe", args.recipe]
    if args.ffcv_max_resolution is not None:
        cmd += ["--ffcv-max-resolution", str(args.ffcv_max_resolution)]
    cmd += ["--wdstool-shards", args.wdstool_shards]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"peer": peer, "error": f"{action} ran past {args.timeout:.0f} s"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode == 0 and lines:
        return json.loads(lines[-1])
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    why = err[-1].strip() if err else f"exit status {r.returncode}, no output"
    return {"peer": peer, "error": f"{action} failed: {why[:300]}"}


def warm_page_cache(data: Path) -> int:
    """Read every input file once (untimed), so that no run pays for the first read."""
    total = 0
    for sub in ("images", "shards", "peers"):
        for root, _, files in os.walk(data / sub):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    while chunk := f.read(1 << 22):
                        total += len(chunk)
    return total


def machine() -> dict[str, Any]:
    from wdstool.base.host import host_info

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {**host_info(), "versions": versions}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    peers = [p for p in PEERS if p in args.peers.split(",")]
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    status: dict[str, str] = {}
    runs: list[dict[str, Any]] = []
    for name in ["wdstool", *peers]:
        r = call(args, name, "check")
        if "skip" in r or "error" in r:
            status[name] = f"skipped: {r.get('skip') or r['error']}"
            runs.append(r)
            log(f"{name}: {status[name]}")
    if "wdstool" in status:
        raise SystemExit(f"wdstool itself cannot run: {status['wdstool']}")
    for name in [p for p in peers if p not in status]:
        t = time.perf_counter()
        r = call(args, name, "prepare")
        if "error" in r:
            status[name] = f"skipped: {r['error']}"
            runs.append(r)
        log(
            f"{name}: prepared in {time.perf_counter() - t:.1f} s"
            if "error" not in r
            else f"{name}: {r['error']}"
        )
    log(f"page cache: read {warm_page_cache(args.data) / 1e9:.2f} GB")
    active = [p for p in peers if p not in status]
    pair = 0
    for rnd in range(args.rounds):
        order = active[rnd % len(active) :] + active[: rnd % len(active)] if active else []
        for i, name in enumerate(order):
            if name in status:
                continue
            pair += 1
            both = ["wdstool", name] if (rnd + i) % 2 == 0 else [name, "wdstool"]
            for who in both:
                r = call(args, who, "run", seed=rnd)
                r.update(round=rnd, pair=pair)
                runs.append(r)
                if "error" in r:
                    status[who] = f"failed: {r['error']}"
                log(
                    f"round {rnd + 1}/{args.rounds} {who}: "
                    + (
                        f"{r['samples_per_s']:.0f} samples/s, peak RSS {r['peak_rss_mb']:.0f} MB"
                        if "samples_per_s" in r
                        else r.get("error", "?")
                    )
                )
            if "wdstool" in status:
                raise SystemExit(f"wdstool failed: {status['wdstool']}")
    meta = json.loads((args.data / "shards" / "index.json").read_text())
    report = {
        "command": " ".join(
            ["python bench/peers/run.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "config": {
            "data": str(args.data),
            "samples": meta["num_samples"],
            "workers": args.workers,
            "batch_size": args.batch_size,
            "image_size": args.image_size,
            "recipe": args.recipe,
            "ffcv_max_resolution": args.ffcv_max_resolution,
            "wdstool_shards": args.wdstool_shards,
            "rounds": args.rounds,
        },
        "machine": machine(),
        "summary": summarize(peers, runs, status),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    Path(f"{args.out}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
