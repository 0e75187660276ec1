"""The loader's saved state: small, versioned, validated on load.

A state is where an epoch stopped: the epoch, and the segments it ran (topology and batches
delivered each), plus what must match to resume (the data set's identity, seed and shuffle
settings). Everything else is recomputed by the plan (``loaders.plan.resume``).
"""

from __future__ import annotations

from typing import Any

from loaders.dataset import Resume, ShardStreamDataset
from loaders.plan import Segment
from wdstool.base.errors import ConfigError

STATE_FORMAT = "wdstool.loader-state"
STATE_VERSION = 1


def _segment(ds: ShardStreamDataset, batches: int) -> Segment:
    return Segment(ds.topology.world_size, ds.config.num_workers, ds.config.batch_size, batches)


def save_state(ds: ShardStreamDataset, batches_delivered: int) -> dict[str, Any]:
    """The state of ``ds`` after ``batches_delivered`` batches of the current pass: a small
    JSON-serialisable dict."""
    c = ds.config
    resume = ds.resume if ds.resume is not None and ds.resume.epoch == ds.epoch else None
    if resume is None:
        history: list[Segment] = [_segment(ds, batches_delivered)]
    else:
        plan = ds.plan()
        history = list(resume.history)
        here = _segment(ds, 0)
        last = history[-1]
        if (last.world_size, last.num_workers, last.batch_size) == (
            here.world_size,
            here.num_workers,
            here.batch_size,
        ):
            history[-1] = _segment(ds, plan.resume_at + batches_delivered)
        else:
            history.append(_segment(ds, batches_delivered))
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "dataset": ds.index.identity,
        "num_samples": ds.index.num_samples,
        "epoch": ds.epoch,
        "rank": ds.topology.rank,
        "batches": history[-1].batches,
        "seed": c.seed,
        "shuffle": c.shuffle,
        "shuffle_buffer": c.shuffle_buffer,
        "uneven": c.uneven.value,
        "drop_last": c.drop_last,
        "segments": [
            {
                "world_size": g.world_size,
                "num_workers": g.num_workers,
                "batch_size": g.batch_size,
                "batches": g.batches,
            }
            for g in history
        ],
    }


def restore_state(ds: ShardStreamDataset, state: dict[str, Any]) -> None:
    """Point ``ds`` at the rest of the epoch ``state`` was saved in. Raises ConfigError for a
    state of another data set, another version, or other shuffle settings; the history is
    checked against this data set here, not in a worker."""
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ConfigError("not a wdstool loader state (missing 'format')")
    if state.get("version") != STATE_VERSION:
        raise ConfigError(
            f"loader state version {state.get('version')!r} is not supported "
            f"(this wdstool reads version {STATE_VERSION})"
        )
    c = ds.config
    if state.get("dataset") != ds.index.identity:
        raise ConfigError(
            "the loader state belongs to another data set (manifest identity "
            f"{str(state.get('dataset'))[:12]}..., this one {ds.index.identity[:12]}...); "
            "refusing to restart from zero silently"
        )
    for key, mine in (
        ("seed", c.seed),
        ("shuffle", c.shuffle),
        ("shuffle_buffer", c.shuffle_buffer),
        ("uneven", c.uneven.value),
        ("drop_last", c.drop_last),
    ):
        if state.get(key) != mine:
            raise ConfigError(
                f"the loader state was saved with {key}={state.get(key)!r}; this loader has "
                f"{key}={mine!r} (they must match to resume)"
            )
    try:
        epoch = int(state["epoch"])
        history = tuple(
            Segment(
                int(g["world_size"]),
                int(g["num_workers"]),
                int(g["batch_size"]),
                int(g["batches"]),
            )
            for g in state["segments"]
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"malformed loader state: {exc!r}") from None
    if not history or epoch < 0:
        raise ConfigError("malformed loader state: no segments")
    ds.set_epoch(epoch)
    ds.resume = Resume(epoch, history)
    ds.plan()
