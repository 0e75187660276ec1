"""Packing samples of images and text into sequences of 4,096 tokens: padded share and time.

    python bench/packing_bench.py [--samples 100000] [--seeds 0,1,2] [--repeats 5] [--out PATH]

The stream is a model of a LLaVA-like mix, stated here because every figure depends on it:

- 55% captions: one image and a caption of log-normal length (median 40 tokens, 20-80 at
  +-2 sigma, clipped there);
- 45% documents: 1-8 images (uniform) and text of log-normal length (median 950 tokens,
  300-3,000 at +-2 sigma, clipped there);
- an image's tokens by Qwen2-VL's rule: each side rounded to a multiple of 28 pixels, the
  area kept within 56*56 .. 28*28*1280 pixels, one token per 28x28 patch, so 256-1,280 tokens;
  its size drawn uniformly from typical photo and screen sizes (SIZES below).

About half of the documents (a quarter of all samples) are longer than 4,096 tokens. Each cell
packs the same stream (one per seed) with ``loaders.plan.packing.pack_sequences``: first-fit and
best-fit, windows 4, 8, 64, 512 and unbounded (``--windows``), and two overflow rules: ``split``
(every token packed: a long document's full pieces fill sequences of their own, its last piece is
packed like any sample) and ``drop`` (only the samples of at most 4,096 tokens: packing's own
difficulty). The padded share is padded tokens over all tokens of the sequences; "below
smallest" is the part of the padding left in sequences whose room is smaller than the stream's
smallest sample (no online rule fills it without smaller samples or splitting); the time is one
pack of the 100,000 samples, median of ``--repeats`` runs (seed 0); "span" is the median and
largest distance in stream positions between a sequence's first and last sample (how far ahead a
streaming planner reads). "below smallest", sequences and span are seed 0's.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from loaders.plan.packing import pack_sequences

CAPACITY = 4096
METHODS = ("first_fit", "best_fit")
OVERFLOWS = ("split", "drop")
# (width, height): phone and camera photos, COCO-like, screenshots, portrait, square crops
SIZES = [(640, 480), (640, 427), (800, 600), (1024, 768), (1280, 720), (1920, 1080),
         (4032, 3024), (480, 640), (768, 1024), (512, 512), (448, 448)]  # fmt: skip


def qwen2vl_tokens(width: int, height: int, patch: int = 28) -> int:
    """Qwen2-VL's smart_resize (min 56*56, max 28*28*1280 pixels), one token per 28x28."""
    min_pixels, max_pixels = 56 * 56, 28 * 28 * 1280
    h, w = max(patch, round(height / patch) * patch), max(patch, round(width / patch) * patch)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = math.floor(height / beta / patch) * patch
        w = math.floor(width / beta / patch) * patch
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / patch) * patch
        w = math.ceil(width * beta / patch) * patch
    return (h // patch) * (w // patch)


def lognormal(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
    """Median sqrt(low*high), low and high at -2 and +2 sigma, clipped to [low, high]."""
    mu, sigma = math.log(math.sqrt(low * high)), math.log(high / low) / 4
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), low, high).astype(np.int64)


def stream(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    image_tokens = np.array([qwen2vl_tokens(w, h) for w, h in SIZES], dtype=np.int64)
    document = rng.random(n) < 0.45
    images = np.where(document, rng.integers(1, 9, n), 1)
    sizes = rng.integers(0, len(SIZES), (n, 8))
    mask = np.arange(8)[None, :] < images[:, None]
    tokens = (image_tokens[sizes] * mask).sum(axis=1)
    text = np.where(document, lognormal(rng, n, 300, 3000), lognormal(rng, n, 20, 80))
    return tokens + text


def spans(p) -> tuple[int, int]:
    first = np.minimum.reduceat(p.index, p.bounds[:-1])
    last = np.maximum.reduceat(p.index, p.bounds[:-1])
    d = last - first
    return int(np.median(d)), int(d.max())


def below(p, smallest: int) -> float:
    """The share of the padding left in rooms smaller than the stream's smallest sample."""
    room = p.capacity - p.sequence_tokens()
    return float(room[room < smallest].sum() / max(1, room.sum()))


def run(args: argparse.Namespace) -> tuple[list[dict], dict[int, np.ndarray]]:
    seeds = [int(s) for s in args.seeds.split(",")]
    windows = [None if w == "none" else int(w) for w in args.windows.split(",")]
    streams = {seed: stream(args.samples, seed) for seed in seeds}
    s0 = streams[seeds[0]]
    rows = []
    for overflow in OVERFLOWS:
        for window in windows:
            for method in METHODS:
                kw = {"method": method, "window": window, "overflow": overflow}
                packs = [pack_sequences(streams[s], CAPACITY, **kw) for s in seeds]
                times = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    pack_sequences(s0, CAPACITY, **kw)
                    times.append(time.perf_counter() - t0)
                row = {**kw, "shares": [p.padded_share for p in packs], "first": packs[0]}
                row["ms"] = statistics.median(times) * 1e3 * 100_000 / args.samples
                rows.append(row)
                print(
                    overflow, window, method, f"{statistics.fmean(row['shares']):.2%}", flush=True
                )
    return rows, streams


def run_windows(args: argparse.Namespace, streams: dict[int, np.ndarray]) -> list[dict]:
    """As the loader packs (``Packing(window=G)``): each stream cut into windows of G samples,
    each window packed on its own; the online methods with 64 sequences open (the loader's
    default), best-fit-decreasing with all of a window's open."""
    rows = []
    for overflow in OVERFLOWS:
        for g in (int(w) for w in args.plan_windows.split(",")):
            for method in (*METHODS, "best_fit_decreasing"):
                kw = {
                    "method": method,
                    "window": None if method == "best_fit_decreasing" else 64,
                    "overflow": overflow,
                }
                shares = []
                for s in streams.values():
                    parts = [
                        pack_sequences(s[a : a + g], CAPACITY, **kw) for a in range(0, len(s), g)
                    ]
                    seqs = sum(x.num_sequences for x in parts)
                    shares.append(sum(x.padded_tokens for x in parts) / (seqs * CAPACITY))
                rows.append({"overflow": overflow, "g": g, "method": method, "shares": shares})
                print(overflow, g, method, f"{statistics.fmean(shares):.2%}", flush=True)
    return rows


def render_windows(rows: list[dict]) -> list[str]:
    mean = {(r["overflow"], r["g"], r["method"]): statistics.fmean(r["shares"]) for r in rows}
    lines = [
        "",
        "## As the loader packs: windows of G samples, each packed on its own",
        "",
        "`Packing(window=G)`: the plan packs each window of G consecutive samples of a rank's",
        "share by itself. First-fit and best-fit with 64 sequences open (the loader's",
        "`open_sequences` default); best-fit-decreasing sorts the window's samples longest",
        "first, all of its sequences open, which only a planner that knows every length",
        "before reading can do (the peers pack online, in each worker's read order).",
        "",
        "| overflow | G | method | padded share (per seed) | mean | ÷ first-fit |",
        "|---|---:|---|---|---:|---:|",
    ]
    for r in rows:
        key = (r["overflow"], r["g"], r["method"])
        ratio = mean[key] / mean[(r["overflow"], r["g"], "first_fit")]
        lines.append(
            f"| {r['overflow']} | {r['g']} | {r['method']} | "
            + ", ".join(f"{x:.2%}" for x in r["shares"])
            + f" | {mean[key]:.2%} | {ratio:.2f} |"
        )
    return lines


def render(args: argparse.Namespace, rows: list[dict], s0: np.ndarray, load: list) -> str:
    mean = {(r["overflow"], r["window"], r["method"]): statistics.fmean(r["shares"]) for r in rows}
    lines = [
        f"# `python bench/packing_bench.py` ({args.samples:,} samples, L = {CAPACITY})",
        "",
        "The mix, the columns and the overflow rules: the docstring of `bench/packing_bench.py`.",
        f"Stream of seed {args.seeds.split(',')[0]}: {s0.sum() / len(s0):.0f} tokens a sample on "
        f"average, median {int(np.median(s0))}, smallest {s0.min()}, "
        f"{np.mean(s0 > CAPACITY):.1%} longer than {CAPACITY}.",
        "",
        f"| overflow | window | method | padded share (seeds {args.seeds}) | mean "
        "| best / first | below smallest | sequences | span median / max | ms per 10^5 |",
        "|---|---:|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        key = (r["overflow"], r["window"], r["method"])
        ratio = mean[key] / mean[(*key[:2], "first_fit")] if r["method"] == "best_fit" else None
        p = r["first"]
        lines.append(
            f"| {r['overflow']} | {r['window'] or 'unbounded'} | {r['method']} | "
            + ", ".join(f"{x:.2%}" for x in r["shares"])
            + f" | {mean[key]:.2%} | {'' if ratio is None else f'{ratio:.2f}'} | "
            f"{below(p, int(s0.min())):.0%} | {p.num_sequences:,} | {' / '.join(map(str, spans(p)))} | "
            f"{r['ms']:.0f} |"
        )
    lines += ["", "Targets (means over the seeds):", ""]
    for overflow in OVERFLOWS:
        ws = [r["window"] for r in rows if r["overflow"] == overflow and r["method"] == "best_fit"]
        ratio = [
            w
            for w in ws
            if mean[(overflow, w, "best_fit")] <= 0.8 * mean[(overflow, w, "first_fit")]
        ]
        five = [w for w in ws if mean[(overflow, w, "best_fit")] <= 0.05]
        fmt = lambda found: ", ".join(str(w or "unbounded") for w in found) or "none"  # noqa: E731
        best = next(
            r["first"] for r in rows if r["overflow"] == overflow and r["method"] == "best_fit"
        )
        floor = -(-best.used_tokens // CAPACITY)
        lines.append(
            f"- {overflow}: best-fit <= 0.8x first-fit at windows: {fmt(ratio)}; best-fit <= 5% "
            f"padded at windows: {fmt(five)}. Volume bound (seed 0): {floor:,} sequences "
            f"(used tokens / L, rounded up), {1 - best.used_tokens / (floor * CAPACITY):.3%} padded."
        )
    lines += [
        "",
        "Best-fit at 0.8x first-fit needs first-fit's padding 25% above best-fit's. Padding in",
        "rooms smaller than the stream's smallest sample (column 'below smallest') is out of reach",
        "of any rule that packs whole samples in stream order, so where it dominates (large",
        "windows) the two methods converge and the ratio tends to 1; best-fit's gain is largest",
        "at small windows, where closing a sequence early wastes its room.",
        *render_windows(args.window_rows),
        "",
        f"Python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; load average (1 min) {load[0]:.2f} before the run and "
        f"{load[1]:.2f} after: the machine was shared, so the times are indicative.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--windows", default="4,8,64,512,none", help="none: unbounded")
    ap.add_argument("--plan-windows", default="256,1024", help="G: samples a plan window")
    ap.add_argument("--out", type=Path, default=None, help="also write the results (Markdown)")
    args = ap.parse_args()
    before = os.getloadavg()[0]
    rows, streams = run(args)
    args.window_rows = run_windows(args, streams)
    text = render(args, rows, next(iter(streams.values())), [before, os.getloadavg()[0]])
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
