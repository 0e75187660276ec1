"""Turn a worker's samples into the batches the plan sized, inside the DataLoader worker (so
the DataLoader runs with ``batch_size=None``).

:class:`BatchAssembler` takes the samples ``loaders.read.worker_stream`` yields, has the
loader's kind of output (``loaders.kinds``) decode each one (into its place in the batch) and
fill each batch's entries, and adds what every kind carries: labels, keys, fields, sources,
valid flags. Under ``on_error="skip"`` a bad sample is replaced, counts stay exact. Each
batch leaves as a :class:`loaders.delivery.Delivery` with the worker's bookkeeping.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Iterator

import torch

from loaders.config import LoaderConfig, OnError
from loaders.delivery import BatchMeta, Decoded, Delivery, Slot, pack_small
from loaders.kinds import OutputKind
from loaders.monitor.clock import WorkerClock
from loaders.plan import Uneven
from loaders.pool import BufferPool
from loaders.read import Located
from loaders.recipe import Seeder, Where
from loaders.schema import FieldBatcher, SampleSchema
from wdstool.base import counters
from wdstool.base.errors import SampleError, ShardError, WdsToolError
from wdstool.format.fields import FieldError

log = logging.getLogger(__name__)


def _reason(message: str, url: str) -> str:
    """A replacement's reason without the shard URL it starts with (the summary names it)."""
    return message[len(url) + 2 :] if message.startswith(url + ": ") else message


class BatchAssembler:
    """Decode + augment samples into batches of a planned size; count replaced samples.

    ``kind``: the loader's kind of output, built for this pass; ``schemas``: per source of
    the pass, what a sample carries; ``source_ids``: batches carry "source" (``source_ids[i]``
    for the pass's source i) where given; ``where``: who runs the recipe's random ops;
    ``aug_seed``: a sample's augmentation draws come from ``Random(f"{aug_seed}:{key}")``, so
    they do not depend on which rank or worker decodes it, nor on what came before (a resumed
    or re-sharded epoch augments every sample as the uninterrupted run would); ``shared``: in
    a worker process (its tensors cross to the loader); ``pool``: its batch slots."""

    def __init__(
        self,
        config: LoaderConfig,
        kind: OutputKind,
        *,
        schemas: tuple[SampleSchema, ...],
        source_ids: tuple[int, ...] | None,
        where: Where,
        aug_seed: str,
        shared: bool,
        pool: BufferPool | None = None,
    ) -> None:
        self.config, self.kind = config, kind
        self.schemas, self.source_ids = schemas, source_ids
        self.aug_seed = aug_seed
        self.shared = shared
        self.pool = pool
        self.replaced = 0
        self.bytes_read = 0
        self.replaced_from: dict[str, int] = {}  # shard URL -> samples replaced, this batch
        self.replaced_why: dict[str, str] = {}  # shard URL -> why (the first reason)
        self._seeder = Seeder(where, any(r.opaque for r in kind.recipes))
        self.clock = WorkerClock.for_pass(
            config.stats, thread=where is Where.THREAD, handoff=where is not Where.MAIN
        )
        self._fields = FieldBatcher(dict(config.pads))
        self._labelled = any(s.label is not None for s in schemas)
        self._fielded = kind.adds_fields or any(
            s.fields or s.fields_fn is not None for s in schemas
        )
        # batch keys every batch carries (those of fields_fn outputs come with the values)
        self._field_names = tuple(
            dict.fromkeys(n for s in schemas if s.fields_fn is None for n, _ in s.fields)
        )

    def _rng(self, loc: Located) -> random.Random:
        # a repeat of a sample (an over-weighted source) and another source's sample of the
        # same key get their own draws; bytes: keys of non-UTF-8 member names carry surrogates
        key = loc.sample.key  # type: ignore[union-attr]
        seed = (
            f"{self.aug_seed}:{key}"
            if (loc.source, loc.rep) == (0, 0)
            else f"{self.aug_seed}:{loc.source}:{loc.rep}:{key}"
        )
        return random.Random(seed.encode("utf-8", "surrogateescape"))

    def _decode(self, loc: Located) -> Decoded:
        """The sample's label and fields (its source's schema reading its members; the label
        is -1 for a source without labels when others have them), and what its kind makes
        of it."""
        sample = loc.sample
        if sample is None:  # a placeholder for what a damaged shard could not give
            raise SampleError(loc.error)
        where = f"{loc.url}: sample {sample.key!r}"
        try:
            label, values = self.schemas[loc.source].read(sample.parts)
            if values:
                self._fields.check(values)
        except FieldError as exc:
            raise SampleError(f"{where}: {exc}") from None
        try:
            payload, extra = self.kind.decode(loc, self._rng(loc), self._seeder, where)
        except WdsToolError:
            raise
        except Exception as exc:  # a transform or a decoder bug: name the sample
            if not self.kind.wraps_errors:
                raise
            raise SampleError(f"{where}: {type(exc).__name__}: {exc}") from exc
        if extra is not None:
            values = {**(values or {}), **extra}
            self._fields.check(values)  # a clip's audio may differ in length, not channels
        label = -1 if label is None and self._labelled else label
        return Decoded(payload, label, sample.key, values, loc.source, not loc.pad)

    def decoded(self, samples: Iterable[Located]) -> Iterator[Decoded]:
        """One (payload, label, key, fields, source, valid) per input sample. Under
        on_error="skip" a bad sample is replaced by the worker's last good one (or, before any,
        by the next good one), so the number of outputs always equals the number of inputs; a
        replacement is not ``valid`` (it repeats another sample)."""
        last_good: Located | None = None
        pending = 0
        it = iter(samples)
        skip = self.config.batch.on_error is OnError.SKIP
        # the stage clocks (loaders.monitor.clock): waiting for a sample, and its recipe
        while (loc := counters.timed("read", next, it, None)) is not None:
            if loc.sample is not None:
                self.bytes_read += sum(len(v) for v in loc.sample.parts.values())
            try:
                out = counters.timed("sample", self._decode, loc)
                last_good = loc
            except SampleError as exc:
                if not skip:
                    raise
                if loc.sample is not None:  # a damaged shard was logged once, by its reader
                    log.warning("replacing a bad sample: %s", exc.message)
                self.replaced += 1
                self.replaced_from[loc.url] = self.replaced_from.get(loc.url, 0) + 1
                self.replaced_why.setdefault(loc.url, _reason(exc.message, loc.url))
                if last_good is None:
                    pending += 1
                    continue
                out = self._decode(last_good)._replace(valid=False)
            yield out
            while pending:
                pending -= 1
                yield self._decode(last_good)._replace(valid=False)  # type: ignore[union-attr]
        if pending:
            raise SampleError(f"all {pending} samples of this worker's share are bad")

    def batches(
        self, samples: Iterable[Located], sizes: list[int], worker: int
    ) -> Iterator[Delivery]:
        """Yield a batch of each of ``sizes`` samples (a plan worker's remaining batches:
        ``WorkerPlan.batch_sizes``, or a kind's own plan's)."""
        it = self.decoded(samples)

        def next_sample() -> Decoded:
            got = next(it, None)
            if got is None:
                raise ShardError(
                    f"worker {worker}: ran out of samples before its planned {sum(sizes)}"
                )
            return got

        for n in sizes:
            before, bytes_before = self.replaced, self.bytes_read
            self.replaced_from, self.replaced_why = {}, {}
            out = Slot(self.pool, n, self.shared)
            meta = BatchMeta(
                n,
                labelled=self._labelled,
                fielded=self._fielded,
                source_ids=self.source_ids,
                with_valid=self.config.epoch.uneven is Uneven.MASK,
            )
            batch = self.kind.fill(next_sample, n, out, meta)
            labels = meta.labels
            if labels is not None and out.slot >= 0:
                pooled_labels = out.tensor((n,), (1,), torch.int64)
                pooled_labels.copy_(labels)
                labels = out.send(pooled_labels)
            meta.into(batch, labels, self._fields.collate(meta.rows, self._field_names))
            if self.shared:  # in a worker process: small tensors cross by value
                pack_small(batch)
            yield from self._handoff(self._delivery(batch, out.slot, before, bytes_before), n)

    def _handoff(self, delivery: Delivery, n: int) -> Iterator[Delivery]:
        """Yield ``delivery`` with the clock's report of the ``n`` samples it holds; the time
        until the stream is resumed is the hand-off's."""
        if self.clock is None:
            yield delivery
            return
        delivery.stats = self.clock.report(n)
        t0 = time.perf_counter()
        yield delivery
        self.clock.suspended(time.perf_counter() - t0)

    def _delivery(self, batch: dict, slot: int, before: int, nbytes: int) -> Delivery:  # type: ignore[type-arg]
        """``batch`` with what this worker counted since ``before`` replaced samples and
        ``nbytes`` bytes read."""
        replaced, where = self.replaced - before, dict(self.replaced_from)
        why = dict(self.replaced_why)
        return Delivery(batch, slot, replaced, where, self.bytes_read - nbytes, why)


__all__ = ["BatchAssembler"]
