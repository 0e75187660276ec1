"""Which samples a report shows, and reading only them.

Samples are drawn by a seeded generator: a shard in proportion to its samples (its bytes
without a manifest), then a byte offset uniform within it; the sample shown is the one that
offset falls into (:class:`wdstool.show.walk.ShardWalker` finds it without reading the shard
from its start), or the next one not shown yet. So a sample's chance is its share of its
shard's bytes: samples with larger images are a little more likely. (Where the sample before
it ends with a large member, its image in webdataset's shards of samples without a caption,
the next sample is shown instead: see walk.py.) The same seed draws the same samples from a
local copy and from S3. When the manifest counts no more samples than asked for, every
sample is shown.

``header_samples`` more samples feed the statistics: after each shown sample the next few are
walked header by header, their image data skipped unread. Shards are read in parallel threads
(requests to S3 wait, they do not compute).
"""

from __future__ import annotations

import bisect
import itertools
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from wdstool.format.tar_read import BLOCK
from wdstool.show.facts import Facts
from wdstool.show.ranged import ReadCounter, ShardFile
from wdstool.show.source import DataSet
from wdstool.show.walk import Picked, ShardWalker, Wanted

Progress = Callable[[int], None]  # called with 1 per sample read


@dataclass(frozen=True, kw_only=True)
class Drawn:
    picked: tuple[Picked, ...]  # by shard, then offset
    facts: tuple[Facts, ...]  # the shown samples and the walked ones, by shard and offset
    every_sample: bool  # the data set has no more samples than were asked for


def draw(
    ds: DataSet,
    *,
    samples: int,
    seed: int,
    header_samples: int,
    walk_share: float | None = None,
    wanted: Wanted,
    counter: ReadCounter,
    storage_options: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> Drawn:
    """Draw and read ``samples`` samples of ``ds`` (fewer where shards run out of samples).
    ``walk_share``: a header walk stops once it has read that share of the bytes of the
    sample it follows (None: walk all ``header_samples``)."""
    total = ds.num_samples
    every = total is not None and total <= samples
    picks = (
        {i: [] for i, s in enumerate(ds.shards) if s.nsamples}
        if every
        else _offsets(ds, samples, seed)
    )
    items = sorted(picks.items())
    counts = _walk_counts(sum(len(v) for _, v in items), header_samples)
    walks = {shard: [next(counts) for _ in offsets] for shard, offsets in items}
    readahead, back = _read_sizes(ds)
    lock = threading.Lock()

    def step(n: int) -> None:
        if progress is not None:
            with lock:
                progress(n)

    def one(item: tuple[int, list[int]]) -> tuple[list[Picked], dict[int, Facts]]:
        shard, offsets = item
        info = ds.shards[shard]
        with ShardFile(info.url, info.filesize, counter, storage_options, readahead) as f:
            walker = ShardWalker(f, shard, wanted, back, walk_share)
            if every:
                return walker.everything(step)
            return walker.picks(offsets, walks[shard], step)

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(items)))) as pool:
        results = list(pool.map(one, items))
    picked = tuple(p for shown, _ in results for p in shown)
    facts = {(f.shard, f.offset): f for _, walked in results for f in walked.values()}
    facts.update({(p.facts.shard, p.facts.offset): p.facts for p in picked})
    return Drawn(picked=picked, facts=tuple(facts[k] for k in sorted(facts)), every_sample=every)


def _offsets(ds: DataSet, n: int, seed: int) -> dict[int, list[int]]:
    """Shard -> sorted byte offsets: ``n`` draws, shards weighted by samples (else bytes)."""
    by_samples = ds.num_samples is not None
    weights = [
        (s.nsamples or 0) if by_samples else s.filesize if s.filesize > 2 * BLOCK else 0
        for s in ds.shards
    ]
    cum = list(itertools.accumulate(weights))
    if not cum or cum[-1] <= 0:
        return {}
    rng = random.Random(f"wdstool-show:{seed}")
    out: dict[int, list[int]] = {}
    for _ in range(n):
        shard = bisect.bisect_right(cum, rng.random() * cum[-1])
        shard = min(shard, len(cum) - 1)
        out.setdefault(shard, []).append(rng.randrange(ds.shards[shard].filesize))
    return {k: sorted(v) for k, v in out.items()}


def _read_sizes(ds: DataSet) -> tuple[int, int]:
    """(readahead, backward step) in bytes, from the mean size of a sample in the shards:
    small against a sample, so that what is read past the samples shown stays a few percent
    of them (~1/32 and ~1/8 of a sample; 4 KB and 16 KB without a manifest)."""
    total = ds.num_samples
    mean = ds.total_bytes / total if total else 128 * 1024

    def blocks(n: float, least: int, most: int) -> int:
        return max(least, min(most, int(n) - int(n) % BLOCK))

    return blocks(mean / 32, 1024, 4096), blocks(mean / 8, 1024, 256 * 1024)


def _walk_counts(n: int, total: int) -> Iterator[int]:
    """How many samples to walk after each of ``n`` shown ones: ``total`` spread evenly."""
    if n == 0:
        return iter(())
    return iter([total // n + (i < total % n) for i in range(n)])
