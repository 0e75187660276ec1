"""``split``: one data set (or any SRC reshard reads) -> one data set per split in DEST/<split>/.

A sample's split is a pure function of its key and the seed: a hash of (seed, key) read as a
number in [0, 1) against the cumulative fractions, in the order given. So a sample never
changes split when the data set is resharded (keys are kept) or appended to (its key and the
seed do not change): split the new data with the same fractions and seed, and every old sample
lands where it was. The sources are scanned once; each split is then written as reshard writes
(layout, copy tasks, manifest last), so an interrupted split finishes on rerun.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from shard_writer.commit import commit
from shard_writer.dest import Destination
from shard_writer.execute import absolute, engine
from shard_writer.options import PackSummary, ProgressFn, ReshardOptions
from shard_writer.reshard import copy_job, plan_reshard
from wdstool.base.errors import ConfigError, InputError

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def parse_fractions(text: str) -> tuple[tuple[str, float], ...]:
    """``"train=0.98,validation=0.02"`` -> ((name, fraction), ...): names usable as folder
    names, each once; fractions > 0 summing to 1 (within 1e-9). One-line ConfigError otherwise."""
    out: list[tuple[str, float]] = []
    for part in text.split(","):
        name, eq, value = part.strip().partition("=")
        if not eq or not name.strip():
            raise ConfigError(f"fractions={text!r}: expected NAME=FRACTION,... (got {part!r})")
        name = name.strip()
        if not _NAME.match(name) or name in (".", ".."):
            raise ConfigError(
                f"fractions={text!r}: split name {name!r}: use letters, digits, _ - ."
            )
        try:
            fraction = float(value)
        except ValueError:
            raise ConfigError(
                f"fractions={text!r}: split {name!r}: {value!r} is not a number"
            ) from None
        if not fraction > 0 or not math.isfinite(fraction):
            raise ConfigError(f"fractions={text!r}: split {name!r}: {value} must be a number > 0")
        if name in dict(out):
            raise ConfigError(f"fractions={text!r}: split {name!r} is named twice")
        out.append((name, fraction))
    total = math.fsum(f for _, f in out)
    if abs(total - 1.0) > 1e-9:
        raise ConfigError(f"fractions={text!r}: the fractions sum to {total:g}, not 1")
    return tuple(out)


def assign(key: str, seed: int, fractions: Sequence[tuple[str, float]]) -> int:
    """The index of ``key``'s split: pure, stable across reshards and appends."""
    digest = hashlib.sha256(f"{seed}\0{key}".encode("utf-8", "surrogateescape")).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    bound = 0.0
    for i, (_, fraction) in enumerate(fractions[:-1]):
        bound += fraction
        if u < bound:
            return i
    return len(fractions) - 1


def split(
    src: str,
    dest_url: str,
    fractions: Sequence[tuple[str, float]],
    options: ReshardOptions | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
    on_total: Callable[[int, int, str], None] | None = None,
) -> dict[str, PackSummary]:
    """Split ``src`` into ``dest_url/<name>/`` data sets by ``fractions`` ((name, fraction),
    as :func:`parse_fractions` gives them); a summary per split."""
    options = options or ReshardOptions()
    if options.append:
        raise ConfigError("split writes new data sets; append=True is for pack and reshard")
    src, dest_url = absolute(src, options), absolute(dest_url, options)
    progress = progress or (lambda *_: None)
    with engine(options) as eng:
        started = time.perf_counter()
        planned = plan_reshard([src], options, storage_options, eng.pool, progress, on_total)
        buckets: list[list[Any]] = [[] for _ in fractions]
        for sample in planned.selection.samples:
            buckets[assign(sample.key, options.seed, fractions)].append(sample)
        for (name, fraction), chosen in zip(fractions, buckets, strict=True):
            if not chosen:
                raise InputError(
                    f"{src}: split {name!r} would be empty ({fraction:g} of "
                    f"{len(planned.selection.samples)} samples); give it a larger fraction"
                )
        recorded = {
            **planned.recorded,
            "split_fractions": {n: f for n, f in fractions},
        }
        out = {}
        for n, ((name, _), chosen) in enumerate(zip(fractions, buckets, strict=True)):
            dest = Destination(f"{dest_url.rstrip('/')}/{name}", storage_options)
            skipped = [
                s
                for s in planned.selection.skipped
                if "key" not in s or assign(s["key"], options.seed, fractions) == n
            ]
            mine = replace(planned, recorded={**recorded, "split": name})
            job = copy_job(mine, chosen, dest, options, None, skipped=skipped)
            out[name] = eng.finish(
                commit(job, eng, started, progress, on_total, phase=f"split {name}"), "scan_shard"
            )
        return out
