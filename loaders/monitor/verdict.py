"""``loader.diagnose()``: is training waiting for the loader, and if it is, what holds it back.

A pure function of a :class:`~loaders.monitor.stats.LoaderStats` (which carries the settings
in force) and the cores this rank may use, so it is tested on constructed numbers as well as
on constructed bottlenecks. The rules, in order:

1. fewer than 3 steps after the first: warming up;
2. the loop waited for data (beyond what a ready batch costs: ``stall_fraction``) under 5% of
   its time and in under 10% of its steps: **not input-bound**;
3. otherwise input-bound, and the workers' time says why: mostly spent handing batches over
   (the main process is short of CPU), mostly waiting for samples (**storage**), or mostly
   computing (decode, resize, the recipe's tail, batch assembly) - then with fewer workers than
   cores the fix is **more workers**, else the stage's own remedy.
"""

from __future__ import annotations

from dataclasses import dataclass

from loaders.monitor.stats import LoaderStats, Window
from loaders.topology import cores_per_rank

MIN_STEPS = 3
WAIT_BOUND = 0.05  # the loop's time spent waiting, above which the loader holds it back ...
STEPS_BOUND = 0.10  # ... or the share of steps that waited
HANDOFF_BOUND = 0.5  # workers waiting this share of their time to hand over: the main side

ADVICE = {
    "storage": "cache_dir= for remote shards, more workers to overlap reads, or faster storage",
    "decode": "more workers, GPU decode (output='encoded' + DeviceDecoder), or pack with "
    "--max-side 512",
    "resize": "channels_last=True, a smaller image_size, or more workers",
    "tail": "move ops that follow Normalize to the GPU, lighter ops, or more workers",
    "assembly": "output='uint8' with normalize on the device, or fewer fields per batch",
    "handoff": "the main process is short of CPU (the step's own work, pin_memory): fewer "
    "workers than cores, or worker_mode='thread'",
}


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """``input_bound``; ``cause``: "warming-up", "not-input-bound", "storage", "workers",
    "decode", "resize", "tail", "assembly" or "handoff"; ``stage``: the stage that takes most of
    the workers' busy time; ``advice``; ``line``: all of it in one line (``str()``)."""

    input_bound: bool
    cause: str
    stage: str
    wait_fraction: float
    input_bound_steps: float
    advice: str
    line: str

    def __str__(self) -> str:
        return self.line


def diagnose(stats: LoaderStats, *, window: str = "recent", cores: int | None = None) -> Verdict:
    """The verdict on ``stats``' ``window`` ("recent" or "epoch"); ``cores``: those this rank
    may use (default: detected)."""
    w: Window = stats.recent if window == "recent" else stats.epoch_so_far
    cores = cores_per_rank() if cores is None else cores
    wf, bound = w.stall_fraction, w.input_bound_steps
    busy = {k: v for k, v in w.stage_shares.items() if k != "handoff"}
    stage = max(busy, key=lambda k: busy[k]) if any(busy.values()) else ""
    share = busy.get(stage, 0.0)
    n, cpu = stats.workers, w.worker_cpu
    who = f"{n} worker{'s' if n != 1 else ''} at {cpu:.0%} CPU" if n else "no workers"

    def verdict(input_bound: bool, cause: str, line: str, advice: str = "") -> Verdict:
        return Verdict(
            input_bound=input_bound,
            cause=cause,
            stage=stage,
            wait_fraction=wf,
            input_bound_steps=bound,
            advice=advice,
            line=line + (f" → {advice}" if advice else ""),
        )

    steady = w.steps - (1 if w.first_batch_s else 0)
    if steady < MIN_STEPS:
        return verdict(False, "warming-up", f"warming up: {w.steps} steps so far")
    waited = f"waited for data {wf:.0%} of the time, in {bound:.0%} of steps"
    if wf < WAIT_BOUND and bound < STEPS_BOUND:
        return verdict(
            False,
            "not-input-bound",
            f"not input-bound ({waited}): the loader is not the bottleneck",
        )
    head = f"input-bound {bound:.0%} of steps ({wf:.0%} of the time waiting for data)"
    handoff = w.stage_shares.get("handoff", 0.0)
    if n and handoff >= HANDOFF_BOUND:
        return verdict(
            True,
            "handoff",
            f"{head}: workers spent {handoff:.0%} of their time handing batches over",
            ADVICE["handoff"],
        )
    if not n:
        return verdict(
            True,
            "workers",
            f"{head}: num_workers=0, the training loop decodes ({stage} {share:.0%})",
            f"num_workers={min(cores, 8)} (or 'auto')",
        )
    if stage == "read":
        rate = w.bytes_read / w.seconds / 1e6 if w.seconds > 0 else 0.0
        return verdict(
            True,
            "storage",
            f"{head}: storage, {share:.0%} of worker time waiting on reads at {rate:.1f} MB/s",
            ADVICE["storage"],
        )
    what = f"{head}: {stage} {share:.0%} of worker time, {who}"
    if n < cores:
        return verdict(
            True,
            "workers",
            f"{what}, {cores} cores",
            f"more workers: num_workers={min(cores, 8)} (or 'auto')",
        )
    return verdict(True, stage, what, ADVICE.get(stage, ""))


__all__ = ["Verdict", "diagnose"]
