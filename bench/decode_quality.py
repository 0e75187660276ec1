"""How far the scaled decode's pixels are from the exact path's, on large images.

    python bench/decode_quality.py [IMAGES_DIR] [--images 300] [--size 1600x1200] [--image-size 224]

For each image (JPEGs under IMAGES_DIR, or ``--images`` rendered by ``wdstool sample-data``'s
generator at ``--size``) it draws RandomResizedCrop parameters as the loader does and compares
``decode_train(..., scaled=True)`` with ``scaled=False`` (the exact pixels of a full-scale
decode), and the eval transform (``eval_sample``) likewise. Reported per path and per scale:
PSNR (over all compared pixels of that group, and the worst single crop) and the mean absolute
difference in levels (0-255). Crops that are not scaled are identical and are only counted.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

import torch


def _stats(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    sq = absd = n = 0.0
    worst = math.inf
    for a, b in pairs:
        d = a.to(torch.float64) - b.to(torch.float64)
        mse = float((d * d).mean())
        worst = min(worst, 10 * math.log10(255**2 / mse) if mse else math.inf)
        sq += float((d * d).sum())
        absd += float(d.abs().sum())
        n += d.numel()
    mse = sq / n
    return {
        "crops": len(pairs),
        "psnr_db": 10 * math.log10(255**2 / mse) if mse else math.inf,
        "worst_psnr_db": worst,
        "mad": absd / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("images_dir", nargs="?", help="a folder of JPEGs (searched recursively)")
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--size", default="1600x1200", help="rendered images' nominal WxH")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)

    from loaders.recipe.builtin import decode_train, eval_box, eval_sample, train_params
    from wdstool.format.decode import header_size, scale_for

    if args.images_dir:
        paths = sorted(Path(args.images_dir).rglob("*.jp*g"))[: args.images]
        datas = [p.read_bytes() for p in paths]
    else:
        from shard_writer.sample_data import render

        w, h = (int(v) for v in args.size.lower().split("x"))
        datas = [render(args.seed, i, 10, (w, h)) for i in range(args.images)]
    if not datas:
        sys.exit("no JPEGs found")
    size, rng = args.image_size, random.Random(args.seed)
    train: dict[int, list] = {}
    evals: dict[int, list] = {}
    for data in datas:
        width, height = header_size(data)
        params = train_params(height, width, rng)
        d = scale_for(params[2], params[3], size)
        exact = decode_train(data, size, params, scaled=False)
        train.setdefault(d, []).append((decode_train(data, size, params, scaled=True), exact))
        box = eval_box(height, width, size)
        d = scale_for(box[2], box[3], size)
        whole = eval_sample(data, size, scaled=False)
        evals.setdefault(d, []).append((eval_sample(data, size, scaled=True), whole))
    print(
        f"{len(datas)} images, output {size} px, mean {statistics.mean(map(len, datas)) / 1e3:.0f} KB"
    )
    for name, groups in (
        ("train (RandomResizedCrop)", train),
        ("eval (resize + centre crop)", evals),
    ):
        everything = [p for g in groups.values() for p in g]
        scaled = [p for d, g in groups.items() if d > 1 for p in g]
        print(f"{name}: {len(scaled)} of {len(everything)} decoded at reduced scale")
        for d in sorted(groups):
            if d == 1:
                same = all(torch.equal(a, b) for a, b in groups[d])
                print(f"  scale 1/1: {len(groups[d])} crops, identical to the exact path: {same}")
                continue
            s = _stats(groups[d])
            print(
                f"  scale 1/{d}: {s['crops']} crops, PSNR {s['psnr_db']:.1f} dB (worst crop "
                f"{s['worst_psnr_db']:.1f} dB), mean abs difference {s['mad']:.2f} levels"
            )
        if scaled:
            s = _stats(scaled)
            print(
                f"  all scaled crops: PSNR {s['psnr_db']:.1f} dB (worst {s['worst_psnr_db']:.1f}"
                f" dB), mean abs difference {s['mad']:.2f} levels"
            )


if __name__ == "__main__":
    main()
