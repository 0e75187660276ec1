"""Rendering a stream-bench report: the text table the CLI prints, and the plot."""

from __future__ import annotations

# every pipeline stream-bench runs, in the order tables and plots show them
PIPELINES = [
    "wdstool",
    "wdstool-exact",
    "wdstool-plain",
    "wdstool-threads",
    "webdataset-fast",
    "webdataset",
    "imagefolder",
]


def render_text(report: dict) -> list[str]:
    """The human-readable report of ``run_stream_bench``, line by line."""
    lines: list[str] = []
    lines.append(
        f"{'pipeline':<15} {'workers':>7} {'samples/s':>10} {'MB/s':>7} {'1st batch':>9} "
        f"{'wait p50':>9} {'wait p99':>9} {'idle %':>7} {'efficiency':>10}"
    )
    for row in report["summary"]:
        eff = f"{row['efficiency']:.2f}" if "efficiency" in row else "-"
        lines.append(
            f"{row['pipeline']:<15} {row['workers']:>7} {row['samples_per_s']:>10.0f} "
            f"{row['mb_per_s']:>7.1f} {row['time_to_first_batch']:>8.2f}s "
            f"{row['wait_p50_ms']:>7.1f}ms {row['wait_p99_ms']:>7.1f}ms {row['idle_pct']:>7.1f} "
            f"{eff:>10}"
        )
    for row in report["summary"]:
        if row.get("worker_peak_rss_mb"):
            lines.append(
                f"memory per worker ({row['pipeline']}, {row['workers']} workers): peak RSS "
                f"{row['worker_peak_rss_mb']:.0f} MB, private "
                f"{row.get('worker_private_mb', 0):.0f} MB (the rest is shared with the main "
                "process after fork)"
            )
    for row in report["summary"]:
        if row.get("peak_pss_mb"):
            lines.append(
                f"memory of the process tree ({row['pipeline']}, {row['workers']} workers): peak "
                f"PSS {row['peak_pss_mb']:.0f} MB, anonymous {row.get('peak_pss_anon_mb', 0):.0f} MB"
            )
    for row in report["summary"]:
        if row.get("verdict"):
            lines.append(f"verdict ({row['pipeline']}, {row['workers']} workers): {row['verdict']}")
    for name, r in report["ratios"].items():
        lines.append(
            f"ratio {name}: median {r['median']:.2f} (range {r['min']:.2f}-{r['max']:.2f}, "
            f"{r['pairs']} pairs)"
        )
    for w, c in report["ceiling"].items():
        line = (
            f"ceiling ({w} process{'es' if w != '1' else ''}, decode+augment, no loader): "
            f"{c['samples_per_s']:.0f} samples/s"
        )
        if c.get("whole_image_samples_per_s"):
            line += f"; decoding whole images: {c['whole_image_samples_per_s']:.0f} samples/s"
        lines.append(line)
    if report.get("decoder") == "whole":
        lines.append(
            "decoder: whole images (wdstool/format/_jpegcrop not built or WDSTOOL_PARTIAL_DECODE=0)"
        )
    elif "scaled_decode" in report:
        lines.append(
            "decoder: partial JPEG decode, "
            + ("scaled for large regions" if report["scaled_decode"] else "exact (full scale)")
            + f"; whole images: {report.get('whole_decoder', '?')}"
        )
    if report.get("recipe"):
        lines.append(
            f"recipe ({report['config'].get('transform_name', 'default')}): {report['recipe']}"
        )
    rec = report.get("recommendation") or {}
    if rec:
        lines.append(
            f"recommendation: num_workers={rec['num_workers']}, "
            f"prefetch_factor={rec['prefetch_factor']}. {rec['why']}"
        )
    if report.get("interrupted"):
        lines.append("(interrupted: figures above cover the runs finished so far)")
    return lines


def plot(report: dict, path: str) -> None:
    """A PNG at ``path``: throughput against workers, and the wait-time histogram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name in PIPELINES:
        rows = [r for r in report["summary"] if r["pipeline"] == name]
        if rows:
            ax1.plot(
                [r["workers"] for r in rows], [r["samples_per_s"] for r in rows], "o-", label=name
            )
    if report["ceiling"]:
        ws = sorted(int(w) for w in report["ceiling"])
        ax1.plot(
            ws,
            [report["ceiling"][str(w)]["samples_per_s"] for w in ws],
            "k--",
            label="ceiling (decode+augment)",
        )
        whole = [report["ceiling"][str(w)].get("whole_image_samples_per_s") for w in ws]
        if all(whole):
            ax1.plot(ws, whole, ":", color="grey", label="ceiling, whole-image decode")
    ax1.xaxis.get_major_locator().set_params(integer=True)
    ax1.set_xlabel("DataLoader workers")
    ax1.set_ylabel("samples/s")
    ax1.set_title("throughput")
    ax1.legend()
    ours = [r for r in report["runs"] if r["name"] == "wdstool" and r["waits"]]
    if ours:
        best = max(ours, key=lambda r: r["samples_per_s"])
        ax2.hist(best["waits"], bins=40)
        ax2.set_title(f"wdstool wait per batch ({best['workers']} workers)")
        ax2.set_xlabel("ms")
        ax2.set_ylabel("batches")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
