"""Restart markers (issue 38): what the lossless transcode costs and what the region decode of a
marked file gains, one image at a time on one thread.

    python bench/restart_bench.py IMAGES_DIR [--images 200] [--crops 2] [--targets 32,64,128]
        [--out bench/results/restart-decode]

For each JPEG under IMAGES_DIR (sorted, the first ``--images``):
- the transcode (``wdstool.format.restart``: libjpeg's coefficient API, its read-back check
  included) at each target interval width: time, bytes against the original, and whether a
  whole decode (``torchvision.io.decode_jpeg``) gives exactly the original's pixels;
- ``--crops`` RandomResizedCrop boxes (scale 0.08-1, ratio 3/4-4/3, torch's generator seeded
  per image), each decoded as the loader decodes it (``scale_for`` 224 px, ``scaled_box``),
  by: a whole decode of the original (``decode_jpeg``), today's partial decode of the original,
  the region decode of each marked file, the partial decode of the marked file with its
  intervals ignored (``restarts=False``), and a whole decode of the marked file. Each variant
  runs twice per box, in rotating order, and keeps its faster time; the crops of the region
  decode are compared with the partial decode's, pixel for pixel.
Reported: the medians of per-image times (ms) and the ratios of the totals.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchvision.io import decode_jpeg
from torchvision.transforms import RandomResizedCrop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from wdstool.format import _jpegcrop
from wdstool.format.decode import scale_for, scaled_box
from wdstool.format.images import jpeg_size
from wdstool.format.restart import add_restarts, restart_layout


def _whole(data: bytes) -> torch.Tensor:
    return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, out


def _crop(data: bytes, box: tuple[int, int, int, int, int], restarts: bool) -> np.ndarray:
    t, x, h, w, scale = box
    out = np.empty((h, w, 3), np.uint8)
    if not _jpegcrop.decode_crop(data, x, t, w, h, out, scale, restarts):
        raise SystemExit("the partial decoder declined an image: not a fair comparison")
    return out


def _boxes(data: bytes, n: int, seed: int) -> list[tuple[int, int, int, int, int]]:
    width, height = jpeg_size(data)
    torch.manual_seed(seed)
    img = torch.empty((1, height, width), dtype=torch.uint8)
    out = []
    for _ in range(n):
        top, left, h, w = RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3])
        scale = scale_for(h, w, 224)
        box = scaled_box(top, left, h, w, scale) if scale != 1 else (top, left, h, w)
        out.append((*box, scale))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    files = sorted(p for p in args.images_dir.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    files = files[: args.images]
    targets = [int(t) for t in args.targets.split(",")]
    times: dict[str, list[float]] = {}
    sizes = {"original": 0, **{f"k{t}": 0 for t in targets}}
    transcode_s = {t: 0.0 for t in targets}
    kept: dict[str, int] = {}
    pixels_differ = crops_differ = crops = 0
    for i, path in enumerate(files):
        data = path.read_bytes()
        width, height = jpeg_size(data)
        sizes["original"] += len(data)
        marked = {}
        for t in targets:
            took, new = _timed(add_restarts, data, (width, height), target_width=t, min_pixels=0)
            transcode_s[t] += took
            if new.kept:
                kept[new.kept] = kept.get(new.kept, 0) + 1
                continue
            assert restart_layout(new.data) is not None
            marked[t] = new.data
            sizes[f"k{t}"] += len(new.data)
            if i < args.pixel_checks and not torch.equal(_whole(data), _whole(new.data)):
                pixels_differ += 1
        variants: list[tuple[str, Any]] = [
            ("whole", lambda b, d=data: _whole(d)),
            ("partial", lambda b, d=data: _crop(d, b, False)),
        ]
        for t, m in marked.items():
            variants.append((f"region k{t}", lambda b, m=m: _crop(m, b, True)))
        if targets[0] in marked:
            m = marked[targets[0]]
            variants.append((f"partial, marked k{targets[0]}", lambda b, m=m: _crop(m, b, False)))
            variants.append((f"whole, marked k{targets[0]}", lambda b, m=m: _whole(m)))
        per_image: dict[str, float] = {}
        for j, box in enumerate(_boxes(data, args.crops, seed=i)):
            best: dict[str, float] = {}
            results: dict[str, Any] = {}
            for rep in range(2):
                order = (
                    variants[(j + rep) % len(variants) :] + variants[: (j + rep) % len(variants)]
                )
                for name, fn in order:
                    took, out = _timed(fn, box)
                    best[name] = min(best.get(name, 1e9), took)
                    results[name] = out
            for name, s in best.items():
                per_image[name] = per_image.get(name, 0.0) + s / args.crops
            for name, out in results.items():
                if name.startswith("region"):
                    crops += 1
                    crops_differ += not np.array_equal(out, results["partial"])
        for name, s in per_image.items():
            times.setdefault(name, []).append(s)
        if (i + 1) % 50 == 0:
            print(f"  {i + 1}/{len(files)} images", file=sys.stderr)
    totals = {name: sum(v) for name, v in times.items()}
    return {
        "images": len(files),
        "crops_per_image": args.crops,
        "mean_bytes": sizes["original"] / len(files),
        "median_ms": {name: 1e3 * statistics.median(v) for name, v in times.items()},
        "total_s": totals,
        "partial_over": {n: totals["partial"] / s for n, s in totals.items()},
        "whole_over": {n: totals["whole"] / s for n, s in totals.items()},
        "size_ratio": {k: sizes[k] / sizes["original"] for k in sizes if k != "original"},
        "transcode_ms": {f"k{t}": 1e3 * s / len(files) for t, s in transcode_s.items()},
        "kept": kept,
        "pixel_checks": min(args.pixel_checks, len(files)),
        "pixels_differ": pixels_differ,
        "region_crops": crops,
        "region_crops_differ": crops_differ,
    }


def report(r: dict[str, Any], argv: list[str]) -> str:
    lines = [
        "# `python bench/restart_bench.py " + " ".join(argv) + "`",
        "",
        f"{r['images']} JPEGs (mean {r['mean_bytes'] / 1e6:.2f} MB), {r['crops_per_image']} "
        "RandomResizedCrop boxes each (224 px output, DCT scaling where the loader uses it), "
        "one thread, best of 2 per box.",
        "",
        "| decode | median ms/image | partial ÷ it | whole ÷ it |",
        "|---|---:|---:|---:|",
    ]
    for name, ms in r["median_ms"].items():
        lines.append(
            f"| {name} | {ms:.2f} | {r['partial_over'][name]:.2f} | {r['whole_over'][name]:.2f} |"
        )
    lines += ["", "| transcode | ms/image | bytes ÷ original |", "|---|---:|---:|"]
    for k, ms in r["transcode_ms"].items():
        lines.append(f"| {k} | {ms:.1f} | {r['size_ratio'][k]:.4f} |")
    lines += [
        "",
        f"Whole decodes of {r['pixel_checks']} marked files against their originals: "
        f"{r['pixels_differ']} differ. Region-decoded crops against the partial decode's: "
        f"{r['region_crops_differ']} of {r['region_crops']} differ. Kept as they were: "
        f"{r['kept'] or 'none'}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("images_dir", type=Path)
    p.add_argument("--images", type=int, default=200)
    p.add_argument("--crops", type=int, default=2)
    p.add_argument("--targets", default="64,32,128", help="interval widths in pixels")
    p.add_argument("--pixel-checks", type=int, default=10**9, help="images to check pixels of")
    p.add_argument("--out", default=None, help="write OUT.json and OUT.txt")
    args = p.parse_args()
    torch.set_num_threads(1)
    r = run(args)
    text = report(r, sys.argv[1:])
    print(text)
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(r, indent=1) + "\n")
        Path(args.out + ".txt").write_text(text)


if __name__ == "__main__":
    main()
