"""bench/peers/run.py's report: the rows (medians, wdstool ÷ peer pair by pair) and the table."""

from __future__ import annotations

import statistics
from typing import Any

from _common import RECIPES

TITLES = {
    "wdstool": "wdstool `make_loader`",
    "dali": "NVIDIA DALI, CPU pipeline",
    "spdl": "SPDL pipeline",
    "litdata": "litdata `StreamingDataset`",
    "mosaic": "MosaicML `StreamingDataset`",
    "ffcv": "FFCV `Loader`",
    "webdataset": "upstream webdataset + `decode_jpeg`",
    "imagefolder": "ImageFolder + PIL",
}


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarize(
    peers: list[str], runs: list[dict[str, Any]], status: dict[str, str]
) -> list[dict[str, Any]]:
    rows = []
    for name in ["wdstool", *peers]:
        mine = [r for r in runs if r["peer"] == name and "samples_per_s" in r]
        row: dict[str, Any] = {"peer": name, "runs": len(mine), "status": status.get(name, "ok")}
        for key in ("samples_per_s", "epoch_s", "first_batch_s", "peak_rss_mb", "peak_pss_mb"):
            row[key] = _median([r[key] for r in mine if r.get(key) is not None])
        if mine:
            row["config"] = mine[0]["config"]
        if name != "wdstool":
            ratios = [
                p["wdstool"]["samples_per_s"] / p[name]["samples_per_s"]
                for p in _pairs(runs, name)
                if p[name]["samples_per_s"] > 0
            ]
            row["wdstool_over_peer"] = {
                "median": _median(ratios),
                "min": round(min(ratios), 3) if ratios else None,
                "max": round(max(ratios), 3) if ratios else None,
                "pairs": [round(x, 3) for x in ratios],
            }
        rows.append(row)
    return rows


def _pairs(runs: list[dict[str, Any]], peer: str) -> list[dict[str, dict[str, Any]]]:
    out = []
    for r in runs:
        if r["peer"] == peer and "samples_per_s" in r:
            ours = next(
                (x for x in runs if x.get("pair") == r["pair"] and x["peer"] == "wdstool"), None
            )
            if ours is not None and "samples_per_s" in ours:
                out.append({peer: r, "wdstool": ours})
    return out


def _fmt(x: float | None, digits: int = 0) -> str:
    return "" if x is None else f"{x:,.{digits}f}"


def markdown(report: dict[str, Any]) -> str:
    m, cfg = report["machine"], report["config"]
    vers = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    recipe = cfg.get("recipe", "default")
    title = "# wdstool and its peers: one epoch, the same job"
    out = [
        title if recipe == "default" else f"{title}, the full training recipe",
        "",
        f"`{report['command']}`",
        "",
        f"{cfg['samples']:,} images ({cfg['data']}), {cfg['workers']} workers (or threads), batch "
        f"{cfg['batch_size']}, {RECIPES[recipe].format(S=cfg['image_size'])}, uint8 "
        f"output, full shuffled epochs, a fresh process per run, page cache warm; medians of "
        f"{cfg['rounds']} rounds. Machine: {m['cores']} cores, {m['cpu_model']}, Python "
        f"{m['python']}; {vers}."
        + (
            ""
            if recipe == "default"
            else " The recipe as torchvision v2 ops everywhere (wdstool fuses the crop into its "
            "decoder) but in DALI (its closest ops) and SPDL (FFmpeg's bicubic crop and scale, "
            "then the v2 ops): see Configurations."
        ),
        "",
        "| pipeline | samples/s | epoch | first batch | peak RSS | peak PSS "
        f"| wdstool ÷ peer (median, range of {cfg['rounds']} pairs) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in report["summary"]:
        title = TITLES[row["peer"]]
        if row["peer"] != "wdstool" and 0 < row["runs"] < cfg["rounds"]:
            title += f" ({row['runs']} of {cfg['rounds']} rounds; see Failures)"
        if row["status"] != "ok" and not row["runs"]:
            out.append(f"| {title} | {row['status']} | | | | | |")
            continue
        ratio = row.get("wdstool_over_peer")
        rtxt = "1 (reference)"
        if ratio is not None:
            rtxt = (
                f"**{ratio['median']:.2f}** ({ratio['min']:.2f}–{ratio['max']:.2f})"
                if ratio["median"] is not None
                else ""
            )
        out.append(
            f"| {title} | {_fmt(row['samples_per_s'])} | {_fmt(row['epoch_s'], 1)} s "
            f"| {_fmt(row['first_batch_s'], 2)} s | {_fmt(row['peak_rss_mb'])} MB "
            f"| {_fmt(row['peak_pss_mb'])} MB | {rtxt} |"
        )
    out += [
        "",
        "samples/s: after the first batch; epoch: from building the pipeline to the last "
        "batch (imports excluded); peak RSS/PSS: sampled every 2 s, summed over the run's "
        "process tree (RSS counts pages shared between processes once per process, PSS "
        "splits them). Ratios > 1: wdstool faster.",
        "",
        "Configurations:",
        "",
    ]
    for row in report["summary"]:
        cfg_row = row.get("config")
        line = f"reads {cfg_row['reads']}; {cfg_row['loader']}" if cfg_row else "(skipped)"
        out.append(f"- {TITLES[row['peer']]}: {line}")
    failures = [r for r in report["runs"] if "error" in r]
    if failures:
        out += ["", "Failures:", ""]
        out += [f"- {r['peer']}: {r['error']}" for r in failures]
    return "\n".join(out) + "\n"
