"""Planning at internet scale: what one rank pays before its first batch, from the manifest alone.

    python bench/scale_bench.py [--repeats 3] [--sizes 8,9] [--ranks 4096,16384] [--out PATH]

Manifests of 10^8 (100,000 shards x 1,000 samples, ~17 MB of ``index.json``) and 10^9 samples
(1,000,000 shards, ~167 MB) are written once under ``--data`` as ``wdstool pack`` writes them
(naming the offsets file ``index.offsets.npy``, which make_loader + len never read), with the
side file ``index.shards.npz``, and again without it (no shard exists: none is opened); and at
10^9 the index ``wdstool index SOURCE --out DIR`` writes for someone else's 1,000,000 shards
counted from their side files (absolute ``s3://`` URLs, 950 to 1,050 samples a shard, no
checksums, no offsets), with its side file and without. Each figure is a fresh Python process
that imports ``loaders``, then times ``make_loader(src, 64, num_workers=8, rank=R-1,
world_size=R)`` + ``len(loader)`` (the foreign index with ``split="shards"``), the last rank of
R, with ``cache_dir`` a folder of its own per manifest (the host's cache: the first rank reads
the side file, or streams ``index.json`` into arrays, and keeps the shard table there; the later
ones map it), and reports its memory above ``import loaders`` (the peak resident set,
``VmHWM``, less the resident set right after the import). ``elastic``: a state saved by a
16,384-rank job half-way through its epoch, loaded by a rank of 12,288 (``load_state_dict`` +
``len``; the state is given, as a restarted rank reads it from its checkpoint). Each runs with
the manifest on local disk and behind a loopback S3 server (moto's, on 127.0.0.1). Medians of
``--repeats`` runs, min and max beside them. What counting the foreign shards costs (side files
against a header scan): ``bench/scale_count.py``.
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

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")  # torch: 8 workers exceed this machine's cores
import loaders
from loaders import make_loader

def status_mb(field):  # VmRSS: now; VmHWM: the peak of this program (ru_maxrss can carry
    with open("/proc/self/status") as f:  # its parent's peak across fork and exec)
        line = next(x for x in f if x.startswith(field + ":"))
    return int(line.split()[1]) / 1024

src, world, opts, cache = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
split = sys.argv[5]
state = json.loads(sys.argv[6]) if len(sys.argv) > 6 else None
base = status_mb("VmRSS")
t0 = time.perf_counter()
loader = make_loader(src, 64, num_workers=8, rank=world - 1, world_size=world,
                     storage_options=opts or None, cache_dir=cache, split=split)
if state is not None:
    loader.load_state_dict(state)
n = len(loader)
seconds = time.perf_counter() - t0
peak = status_mb("VmHWM")
print(json.dumps({"seconds": seconds, "above_import_mb": peak - base, "len": n}))
"""

STATE = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from loaders import make_loader
opts = json.loads(sys.argv[2])
loader = make_loader(sys.argv[1], 64, num_workers=8, rank=0, world_size=16384,
                     storage_options=opts or None, cache_dir=sys.argv[3], split=sys.argv[4])
state = loader.state_dict()
state["segments"][-1]["batches"] = state["batches"] = len(loader) // 2
print(json.dumps(state))
"""


def manifest(root: Path, exp: int) -> tuple[Path, Path]:
    """``root/ours-1eEXP/``: 10^exp samples in shards of 1,000, ``index.json`` and the side
    file ``index.shards.npz`` as ``wdstool pack`` writes them; ``root/ours-1eEXP-manifest-only/``:
    the same ``index.json`` alone (written once)."""
    from wdstool.format.manifest import Manifest, ShardEntry
    from wdstool.format.sample_offsets import OFFSETS_NAME, OffsetsFile, shards_digest

    d, alone = root / f"ours-1e{exp}", root / f"ours-1e{exp}-manifest-only"
    if (alone / "index.json").exists():
        return d, alone
    n = 10**exp // 1000
    shards = tuple(ShardEntry(f"train-{i:07d}.tar", 1000, 10**8, f"{i:064x}") for i in range(n))
    m = Manifest(
        shards=shards,
        fingerprint=f"{exp:064x}",
        name=f"scale-1e{exp}",
        sample_offsets=OffsetsFile(OFFSETS_NAME, "<u4", 128, 10**exp, shards_digest(shards)),
    )
    return _write(m, d, alone)


def foreign(root: Path) -> tuple[Path, Path]:
    """``root/foreign-1e9/``: the index ``wdstool index --out`` writes for 1,000,000 shards of
    someone else's counted from their side files (950 to 1,050 samples each, 10^9 in all);
    ``root/foreign-1e9-manifest-only/``: its ``index.json`` alone."""
    from shard_writer.index_folder import index_manifest

    d, alone = root / "foreign-1e9", root / "foreign-1e9-manifest-only"
    if (alone / "index.json").exists():
        return d, alone
    n = 10**6
    counts = [950 + (i * 7919) % 101 for i in range(n)]  # 950 to 1,050: 1,000 on average
    counts[-1] += 10**9 - sum(counts)  # 10^9 samples in all (the last shard a few off)
    m = index_manifest(
        [f"s3://datacomp/pool/{i:08d}.tar" for i in range(n)],
        counts,
        [c * 41_000 + 10_240 for c in counts],
        "pool",
    )
    return _write(m, d, alone)


def _write(m, d: Path, alone: Path) -> tuple[Path, Path]:
    from wdstool.format.shard_table import SIDE_NAME, side_bytes

    for folder in (d, alone):
        folder.mkdir(parents=True, exist_ok=True)
    side = side_bytes(m)
    assert side is not None
    (d / SIDE_NAME).write_bytes(side)
    (d / "index.json").write_bytes(m.dumps())
    (alone / "index.json").write_bytes((d / "index.json").read_bytes())
    return d, alone


def child(code: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO
    )
    if out.returncode:
        raise SystemExit(f"child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout.strip().splitlines()[-1]


def measure(
    src: str,
    world: int,
    opts: dict,
    cache: Path,
    repeats: int,
    split: str,
    state: str | None = None,
) -> dict:
    args = [src, str(world), json.dumps(opts), str(cache), split] + ([state] if state else [])
    runs = [json.loads(child(CHILD, *args)) for _ in range(repeats)]
    secs = sorted(r["seconds"] for r in runs)
    mem = sorted(r["above_import_mb"] for r in runs)
    return {"seconds": secs, "mb": mem, "len": runs[0]["len"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="8,9", help="exponents: 10^8 and 10^9 samples")
    ap.add_argument("--ranks", default="4096,16384")
    ap.add_argument("--data", type=Path, default=REPO / "bench" / "data" / "scale")
    ap.add_argument("--no-s3", action="store_true", help="local disk only (no counting cost)")
    ap.add_argument("--no-foreign", action="store_true", help="our manifests only")
    ap.add_argument("--out", type=Path, default=None, help="also write the results (Markdown)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    ranks = [int(x) for x in args.ranks.split(",")]
    # (kind, exponent) -> (folder with the side file, folder without), split
    sets = {("ours", e): (manifest(args.data, e), "samples") for e in sizes}
    if 9 in sizes and not args.no_foreign:
        sets[("foreign", 9)] = (foreign(args.data), "shards")
    on_disk = {
        name: (sets[("foreign", 9)][0][0] / name).stat().st_size
        for name in ("index.json", "index.shards.npz")
        if ("foreign", 9) in sets
    }
    rows: list[dict] = []
    storages: list[tuple[str, dict, dict]] = [
        ("local disk", {}, {k: (str(d), str(a)) for k, ((d, a), _) in sets.items()})
    ]
    s3, cost = None, None
    if not args.no_s3:
        from wdstool.base.locals3 import LocalS3

        s3 = LocalS3().__enter__()
        s3.make_bucket("scale")
        client = s3.client()
        for (d, a), _ in sets.values():
            for folder in (d, a):
                for f in folder.iterdir():
                    body = f.read_bytes()
                    client.put_object(Bucket="scale", Key=f"{folder.name}/{f.name}", Body=body)
        urls = {
            k: (f"s3://scale/{d.name}", f"s3://scale/{a.name}") for k, ((d, a), _) in sets.items()
        }
        storages.append(("loopback S3", s3.storage_options, urls))
    try:
        for where, opts, urls in storages:
            for key, (_, split) in sets.items():
                rows += _rows(args, where, opts, key, urls[key], split, ranks)
        if s3 is not None and not args.no_foreign:
            from scale_count import count_cost

            cost = count_cost(s3)
            print(json.dumps(cost), flush=True)
    finally:
        if s3 is not None:
            s3.__exit__(None, None, None)
    text = render(args, rows, on_disk, cost)
    print(text)
    if args.out:
        args.out.write_text(text)


def _rows(
    args: argparse.Namespace,
    where: str,
    opts: dict,
    key: tuple[str, int],
    urls: tuple[str, str],
    split: str,
    ranks: list[int],
) -> list[dict]:
    """One data set's rows on one storage: the host's first rank without and with the side
    file, later ranks, an elastic resume."""
    (kind, e), (side, alone), out = key, urls, []
    cache = args.data / "cache" / f"{where.split()[0]}-{kind}-1e{e}"
    base = {"where": where, "kind": kind, "samples": e}
    for what, src in (("first-parse", alone), ("first-side", side)):
        shutil.rmtree(cache, ignore_errors=True)  # the host's first rank
        r = measure(src, ranks[-1], opts, cache, 1, split)
        out.append({**base, "ranks": ranks[-1], "what": what, **r})
        print(where, kind, f"1e{e}", what, r, flush=True)
    for world in ranks if kind == "ours" else ranks[-1:]:
        r = measure(side, world, opts, cache, args.repeats, split)
        out.append({**base, "ranks": world, "what": "fresh", **r})
        print(where, kind, f"1e{e}", world, r, flush=True)
    if 16384 in ranks:
        state = child(STATE, side, json.dumps(opts), str(cache), split)
        r = measure(side, 12288, opts, cache, args.repeats, split, state)
        out.append({**base, "ranks": 12288, "what": "elastic", **r})
        print(where, kind, f"1e{e}", "elastic 16384 -> 12288", r, flush=True)
    return out


def render(
    args: argparse.Namespace, rows: list[dict], on_disk: dict[str, int], cost: dict | None
) -> str:
    def mmm(v: list[float], fmt: str) -> str:
        return " / ".join(format(x, fmt) for x in (v[0], statistics.median(v), v[-1]))

    lines = [
        "# Planning at scale: one rank's make_loader + len, from the manifest alone",
        "",
        f"`python bench/scale_bench.py --repeats {args.repeats}` (`make bench-scale`); the "
        "method: the script's docstring. 8 workers, batch 64, the last rank. The goal: under "
        "1 s and 300 MB on every row.",
        "",
        "| manifest on | data set | samples | ranks | what | seconds min / median / max "
        "| MB above `import loaders` min / median / max | batches |",
        "|---|---|---|---:|---|---|---|---:|",
    ]
    kinds = {"ours": "ours (pack)", "foreign": "someone else's (`wdstool index`), split=shards"}
    for r in rows:
        what = {
            "first-parse": "the host's first rank, no side file: streams index.json, keeps the table",
            "first-side": "the host's first rank: reads the side file, keeps the table",
            "fresh": "a later rank: the kept table",
            "elastic": "elastic: a 16,384-rank state resumed (the kept table)",
        }[r["what"]]
        lines.append(
            f"| {r['where']} | {kinds[r['kind']]} | 10^{r['samples']} | {r['ranks']:,} | {what} | "
            f"{mmm(r['seconds'], '.2f')} | {mmm(r['mb'], '.0f')} | {r['len']:,} |"
        )
    if on_disk:
        samples = 10**9
        lines += [
            "",
            "## The index of someone else's 10^9 samples on disk (`wdstool index --out DIR`)",
            "",
            "| file | size |",
            "|---|---:|",
            *(f"| `{n}` | {b / 1e6:,.1f} MB |" for n, b in on_disk.items()),
            f"| `index.offsets.npy` (only where tar headers were read: 4 bytes a sample, "
            f"computed) | {(4 * samples + 128) / 1e9:,.1f} GB |",
        ]
    if cost is not None:
        from scale_count import render as render_cost

        lines += ["", *render_cost(cost)]
    lines += [
        "",
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{time.strftime('%Y-%m-%d')}; load average (1 min) {os.getloadavg()[0]:.2f} at the end.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
