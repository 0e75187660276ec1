"""The loader's saved state: small, versioned, validated on load.

A state is where an epoch stopped: the epoch, and the segments it ran (topology and batches
delivered each), the mixture that epoch was planned with (each source's identity, URL, weight,
and the sources' cursors), plus what must match to resume (seed and shuffle settings).
Everything else is recomputed by the plan (``loaders.plan.resume``).

Resuming with other sources or weights finishes the interrupted epoch as it was planned (its
sources are found among the loader's by identity) and applies the loader's own mixture from the
next epoch on, every source's cursor carried over (a new source starts at 0).

A data set appended to since (``pack``/``reshard --append``) is found by its history: the
interrupted epoch finishes on the samples of the version it was planned on (that version's
shards are the first shards of the data set, unchanged), and every version is read from the
next epoch on. A data set that is neither that version nor a later one is a one-line error.
"""

from __future__ import annotations

from typing import Any

from loaders.dataset import Resume, ShardStreamDataset
from loaders.plan import MixSource, Mixture, Segment, Split
from loaders.source import identity_key
from wdstool.base.errors import ConfigError

STATE_FORMAT = "wdstool.loader-state"
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)


def _segment(ds: ShardStreamDataset, batches: int) -> Segment:
    topo = ds.topology
    return Segment(topo.world_size, topo.num_workers, ds.config.epoch.batch_size, batches)


def save_state(ds: ShardStreamDataset, batches_delivered: int) -> dict[str, Any]:
    """The state of ``ds`` after ``batches_delivered`` batches of the current pass: a small
    JSON-serialisable dict."""
    c = ds.config.epoch
    resume = ds.resumed()
    if resume is None:
        history: list[Segment] = [_segment(ds, batches_delivered)]
        mixture, ids = ds.mixture, tuple(range(len(ds.sources)))
    else:  # O(segments): the plan is not needed (a same-topology plan resumes at last.batches)
        history = list(resume.history)
        here = _segment(ds, 0)
        last = history[-1]
        if (last.world_size, last.num_workers, last.batch_size) == (
            here.world_size,
            here.num_workers,
            here.batch_size,
        ):
            history[-1] = _segment(ds, last.batches + batches_delivered)
        else:
            history.append(_segment(ds, batches_delivered))
        mixture, ids = resume.mixture, resume.sources
    cursors = mixture.cursors_at(ds.epoch)
    identities = [_identity(ds, i, src) for i, src in zip(ids, mixture.sources, strict=True)]
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "dataset": identities[0],
        "num_samples": mixture.total,
        "epoch": ds.epoch,
        "rank": ds.topology.rank,
        "batches": history[-1].batches,
        "seed": c.seed,
        "shuffle": c.shuffle,
        "shuffle_buffer": c.shuffle_buffer,
        "uneven": c.uneven.value,
        "drop_last": c.drop_last,
        **({"split": c.split.value} if c.split is not Split.SAMPLES else {}),
        "segments": [
            {
                "world_size": g.world_size,
                "num_workers": g.num_workers,
                "batch_size": g.batch_size,
                "batches": g.batches,
            }
            for g in history
        ],
        "mixture": {
            "epoch_size": mixture.epoch_size,
            "repeats": mixture.repeats,
            "sources": [
                {
                    "identity": identity,
                    "url": ds.sources[i].url,
                    "weight": src.weight,
                    "num_samples": src.num_samples,
                    "cursor": cursor,
                }
                for i, identity, src, cursor in zip(
                    ids, identities, mixture.sources, cursors, strict=True
                )
            ],
        },
    }


def _identity(ds: ShardStreamDataset, i: int, src: MixSource) -> str:
    """The identity of the data set version ``src`` plans over: the loader's source ``i`` as it
    is, or (a resumed epoch planned on an earlier version) as it was then."""
    index = ds.sources[i].index
    if len(src.sizes) == len(index.sizes):
        return index.identity
    return next(vid for vid, shards, _n in index.versions if shards == len(src.sizes))


def restore_state(ds: ShardStreamDataset, state: dict[str, Any]) -> None:
    """Point ``ds`` at the rest of the epoch ``state`` was saved in, and carry the sources'
    cursors into its own mixture from the next epoch. Raises ConfigError for a state whose
    interrupted epoch needs a source this loader does not read, of another version, or with other
    shuffle settings; the history is checked against the data here, not in a worker."""
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ConfigError("not a wdstool loader state (missing 'format')")
    if state.get("version") not in READABLE_VERSIONS:
        raise ConfigError(
            f"loader state version {state.get('version')!r} is not supported "
            f"(this wdstool reads versions {', '.join(map(str, READABLE_VERSIONS))})"
        )
    c = ds.config.epoch
    for key, mine in (
        ("seed", c.seed),
        ("shuffle", c.shuffle),
        ("shuffle_buffer", c.shuffle_buffer),
        ("uneven", c.uneven.value),
        ("drop_last", c.drop_last),
        ("split", c.split.value),
    ):
        if state.get(key, "samples" if key == "split" else None) != mine:
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
        saved = _saved_sources(state)
        epoch_size = state.get("mixture", {}).get("epoch_size")
        epoch_size = None if epoch_size is None else int(epoch_size)
        repeats = int(state.get("mixture", {}).get("repeats", 1))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"malformed loader state: {exc!r}") from None
    if not history or epoch < 0 or not saved:
        raise ConfigError("malformed loader state: no segments or no sources")
    old, ids = _interrupted_mixture(ds, saved, epoch_size, epoch, repeats)
    ds.set_epoch(epoch)
    ds.resume = Resume(epoch, history, old, ids)
    ds.mixture = _carried(ds, old, ids, epoch + 1)
    ds.plan()


def _saved_sources(state: dict[str, Any]) -> list[dict[str, Any]]:
    mixture = state.get("mixture")
    if mixture is None:  # version 1: one data set, whole, every epoch
        return [{"identity": str(state["dataset"]), "url": "", "weight": 1.0, "cursor": 0}]
    out = []
    for s in mixture["sources"]:
        weight = float(s["weight"])
        if not weight > 0:
            raise ValueError(f"weight {weight!r}")
        out.append(
            {
                "identity": str(s["identity"]),
                "url": str(s.get("url", "")),
                "weight": weight,
                "cursor": int(s["cursor"]),
            }
        )
    return out


def _interrupted_mixture(
    ds: ShardStreamDataset,
    saved: list[dict[str, Any]],
    epoch_size: int | None,
    epoch: int,
    repeats: int = 1,
) -> tuple[Mixture, tuple[int, ...]]:
    """The mixture the interrupted epoch was planned with (its ``repeats`` too), over the
    loader's sources found by identity (in order, so a data set listed twice is matched
    twice)."""
    free = list(range(len(ds.sources)))
    ids, sources, cursors = [], [], []
    for n, s in enumerate(saved):
        # the data set as it is, else one appended to since (the epoch's version in its history)
        match = next((i for i in free if ds.sources[i].index.identity == s["identity"]), None)
        if match is None:
            match = next(
                (i for i in free if ds.sources[i].index.version_sizes(s["identity"])), None
            )
        if match is None:
            where = s["url"] or f"identity {s['identity'][:12]}..."
            same_url = [i for i in free if s["url"] and ds.sources[i].url == s["url"]]
            if same_url:
                raise ConfigError(
                    f"the loader state's epoch {epoch} was planned on {where} as it was then "
                    f"(source {n} of the saved mixture); the data set there now is neither that "
                    "version nor one appended to it (repacked or resharded?), so that epoch "
                    "cannot be finished on it; start a fresh epoch without the state"
                )
            raise ConfigError(
                f"the loader state belongs to another data set: its epoch {epoch} still needs "
                f"{where} (source {n} of the saved mixture), which this loader does not read; "
                "add it back to finish that epoch, or start a fresh epoch without the state"
            )
        free.remove(match)
        index = ds.sources[match].index
        sizes = index.version_sizes(s["identity"])
        assert sizes is not None
        ids.append(match)
        sources.append(MixSource(sizes, s["weight"], identity_key(s["identity"])))
        cursors.append(s["cursor"])
    mixture = Mixture(
        tuple(sources), epoch_size, start_epoch=epoch, cursors=tuple(cursors), repeats=repeats
    )
    return mixture, tuple(ids)


def _carried(ds: ShardStreamDataset, old: Mixture, ids: tuple[int, ...], start: int) -> Mixture:
    """The loader's own mixture from epoch ``start`` on, each source's cursor carried over from
    the interrupted epoch's end (0 for a source that was not in it)."""
    after = old.cursors_at(start)
    cursors = [0] * len(ds.sources)
    for i, c in zip(ids, after, strict=True):
        cursors[i] = c
    own = ds.mixture  # its own repeats too: a changed k applies from the next epoch
    return Mixture(
        own.sources, own.epoch_size, start_epoch=start, cursors=tuple(cursors), repeats=own.repeats
    )
