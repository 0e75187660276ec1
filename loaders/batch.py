"""Decode + augment a worker's samples straight into preallocated batch tensors.

:class:`BatchAssembler` takes the samples ``loaders.read.worker_stream`` yields, runs the
recipe (``loaders.recipe``) on each and forms the batches the plan sized, inside the DataLoader
worker (so the DataLoader runs with ``batch_size=None``). Under ``on_error="skip"`` a bad sample
is replaced, counts stay exact.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from loaders.clips import ClipRecipe, as_clip_fields
from loaders.delivery import BatchMeta, Decoded, Delivery, Slot
from loaders.monitor.clock import WorkerClock
from loaders.plan import WorkerPlan
from loaders.pool import BufferPool, new_batch
from loaders.read import Located
from loaders.recipe import Recipe, Seeder, Where, check_output, to_row
from loaders.recipe.normalize import normalize, normalize_into
from loaders.recipe.views import run_views
from loaders.schema import FieldBatcher, Pad, SampleSchema
from wdstool.base import counters
from wdstool.base.errors import SampleError, ShardError, WdsToolError
from wdstool.format.fields import FieldError
from wdstool.format.images import IMAGE_ORDER
from wdstool.format.mapped import materialized

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class DecodeSpec:
    recipes: tuple[Recipe, ...]  # one per view (one without views)
    output: str  # "uint8" | "float" | "encoded"
    views: bool = False  # batches carry "views" (a list per recipe) instead of "pixel_values"
    where: Where = Where.WORKER  # who runs the recipe's random ops (their seeding)
    on_error: str = "raise"  # "raise" | "skip"
    channels_last: bool = False  # batches in [B,S,S,3] memory (torch.channels_last strides)
    scaled_decode: bool = True  # JPEG regions > 2x the output decoded at reduced scale
    schemas: tuple[SampleSchema, ...] = (SampleSchema(),)  # per source: label, extra fields
    source_ids: tuple[int, ...] | None = None  # batches carry "source": source_ids[i] for i
    with_valid: bool = False  # batches carry "valid" (uneven="mask"): False for padding
    stats: bool = True  # stage clocks on (loaders.monitor.clock)
    clips: ClipRecipe | None = None  # a clips loader: video samples become clips
    pads: tuple[tuple[str, Pad], ...] = ()  # fields batched by padding (pad_fields)

    @property
    def recipe(self) -> Recipe:
        return self.recipes[0]


def _image_part(loc: Located) -> tuple[bytes, str]:
    parts = loc.sample.parts  # type: ignore[union-attr]
    for ext in IMAGE_ORDER:
        if ext in parts:
            return materialized(parts[ext]), ext  # type: ignore[return-value]
    raise SampleError(f"{loc.url}: sample {loc.sample.key!r} has no image member")


def _reason(message: str, url: str) -> str:
    """A replacement's reason without the shard URL it starts with (the summary names it)."""
    return message[len(url) + 2 :] if message.startswith(url + ": ") else message


def _fmt(shape: tuple[Any, ...]) -> str:
    return f"{str(shape[0]).replace('torch.', '')} {list(shape[1:])}"


def _row(batch: torch.Tensor, i: int, cthw: bool) -> torch.Tensor:
    """Sample ``i`` of a batch as its recipe writes it: [3,h,w], or a clip's [T,3,h,w]."""
    return batch[i].transpose(0, 1) if cthw else batch[i]


def _next_sample(it: Iterator[Any], plan: WorkerPlan) -> Any:
    got = next(it, None)
    if got is None:
        raise ShardError(
            f"worker {plan.worker}: ran out of samples before its planned {plan.num_samples}"
        )
    return got


class BatchAssembler:
    """Decode + augment samples into batches of a planned size; count replaced samples."""

    def __init__(
        self, spec: DecodeSpec, aug_seed: str, shared: bool, pool: BufferPool | None = None
    ) -> None:
        """``aug_seed``: a sample's augmentation draws come from ``Random(f"{aug_seed}:{key}")``,
        so they do not depend on which rank or worker decodes it, nor on what came before (a
        resumed or re-sharded epoch augments every sample as the uninterrupted run would)."""
        self.spec = spec
        self.aug_seed = aug_seed
        self.shared = shared
        self.pool = pool
        self._scratch: torch.Tensor | None = None
        self._dest: list[Any] = [None] * len(spec.recipes)  # per view: where the head writes
        self.replaced = 0
        self.bytes_read = 0
        self.replaced_from: dict[str, int] = {}  # shard URL -> samples replaced, this batch
        self.replaced_why: dict[str, str] = {}  # shard URL -> why (the first reason)
        self._seeder = Seeder(spec.where, any(r.opaque for r in spec.recipes))
        counters.enabled = spec.stats
        self.clock = (
            WorkerClock(thread=spec.where is Where.THREAD, handoff=spec.where is not Where.MAIN)
            if spec.stats
            else None
        )
        # per view, what every output must be, once known
        self._shapes: list[tuple[Any, ...] | None] = [None] * len(spec.recipes)
        self._fields = FieldBatcher(dict(spec.pads))
        self._labelled = any(s.label is not None for s in spec.schemas)
        self._fielded = spec.clips is not None or any(
            s.fields or s.fields_fn is not None for s in spec.schemas
        )
        # batch keys every batch carries (those of fields_fn outputs come with the values)
        self._field_names = tuple(
            dict.fromkeys(n for s in spec.schemas if s.fields_fn is None for n, _ in s.fields)
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

    def _meta(self, loc: Located) -> tuple[int | None, dict[str, Any] | None]:
        """The sample's label and fields (its source's schema reading its members); the label
        is -1 for a source without labels when others have them."""
        sample = loc.sample
        if sample is None:  # a placeholder for what a damaged shard could not give
            raise SampleError(loc.error)
        try:
            label, values = self.spec.schemas[loc.source].read(sample.parts)
            if values:
                self._fields.check(values)
        except FieldError as exc:
            raise SampleError(f"{loc.url}: sample {sample.key!r}: {exc}") from None
        return (-1 if label is None and self._labelled else label), values

    def _prepare(self, loc: Located) -> Decoded:
        """output="encoded": the image bytes, checked up to the header, with the recipe's
        geometry for them (the draws ``_decode`` makes), for a device-side decoder."""
        label, values = self._meta(loc)
        data, _ext = _image_part(loc)
        key = loc.sample.key  # type: ignore[union-attr]
        geometry = self.spec.recipe.draw(data, self._rng(loc), where=f"{loc.url}: sample {key!r}")
        return Decoded((data, geometry), label, key, values, loc.source, not loc.pad)

    def _clip(self, loc: Located) -> Decoded:
        """A clips loader's sample: the clip of its video (or its image, still), the clip's
        span, number and audio in its fields."""
        label, values = self._meta(loc)
        key = loc.sample.key  # type: ignore[union-attr]
        where = f"{loc.url}: sample {key!r}"
        clips = self.spec.clips
        assert clips is not None
        clip = loc.rep % clips.clips.clips_per_video
        try:
            got = clips.sample(
                loc.sample, loc.url, self._rng(loc), self._seeder, self._dest[0], clip
            )
        except WdsToolError:
            raise
        except Exception as exc:  # a transform or a decoder bug: name the sample
            raise SampleError(f"{where}: {type(exc).__name__}: {exc}") from exc
        fields = {**(values or {}), **as_clip_fields(got, clip, clips.clips)}
        self._fields.check(fields)  # the audio's length may differ, its channels may not
        return Decoded([got.video], label, key, fields, loc.source, not loc.pad)

    def _decode(self, loc: Located) -> Decoded:
        if self.spec.output == "encoded":
            return self._prepare(loc)
        if self.spec.clips is not None:
            return self._clip(loc)
        label, values = self._meta(loc)
        key = loc.sample.key  # type: ignore[union-attr]
        where = f"{loc.url}: sample {key!r}"
        spec = self.spec
        try:
            data, _ext = _image_part(loc)
            rng = self._rng(loc)
            kw = dict(scaled=spec.scaled_decode, where=where)
            if spec.views:  # each view from its own generator: seeded per (sample, view)
                base = rng.getrandbits(64)
                rngs = [random.Random(base + v) for v in range(len(spec.recipes))]
                images = run_views(spec.recipes, data, rngs, self._seeder, self._dest, **kw)
            else:
                images = [spec.recipe(data, rng, self._seeder, self._dest[0], **kw)]  # type: ignore[arg-type]
        except WdsToolError:
            raise
        except Exception as exc:  # a transform or a decoder bug: name the sample
            raise SampleError(f"{where}: {type(exc).__name__}: {exc}") from exc
        for v, img in enumerate(images):
            if img is not self._dest[v]:
                self._check(img, where, v)
        return Decoded(images, label, key, values, loc.source, not loc.pad)

    def _check(self, img: Any, where: str, view: int) -> None:
        """A transform's output: a [3,H,W] tensor of the dtype ``output`` allows (ConfigError
        otherwise), of the shape and dtype every other sample has (SampleError otherwise)."""
        if isinstance(img, torch.Tensor) and (img.dtype, *img.shape) == self._shapes[view]:
            return
        check_output(img, where, torch.uint8 if self.spec.output == "uint8" else None)
        recipe = self.spec.recipes[view]
        first = self._shapes[view]
        if first is None and recipe.size is not None:
            first = (recipe.dtype, 3, *recipe.size)
        got = (img.dtype, *img.shape)
        if first is not None and got != first:
            name = f"view {view} of the transform" if self.spec.views else "the transform"
            raise SampleError(
                f"{where}: {name} returned {_fmt(got)} where the other samples are "
                f"{_fmt(first)}; a batch needs one size and dtype"
            )
        self._shapes[view] = got

    def decoded(self, samples: Iterable[Located]) -> Iterator[Decoded]:
        """One (image, label, key, fields, source, valid) per input sample. Under
        on_error="skip" a bad sample is replaced by the worker's last good one (or, before any,
        by the next good one), so the number of outputs always equals the number of inputs; a
        replacement is not ``valid`` (it repeats another sample)."""
        last_good: Located | None = None
        pending = 0
        it = iter(samples)
        # the stage clocks (loaders.monitor.clock): waiting for a sample, and its recipe
        while (loc := counters.timed("read", next, it, None)) is not None:
            if loc.sample is not None:
                self.bytes_read += sum(len(v) for v in loc.sample.parts.values())
            try:
                out = counters.timed("sample", self._decode, loc)
                last_good = loc
            except SampleError as exc:
                if self.spec.on_error != "skip":
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
        self, samples: Iterable[Located], plan: WorkerPlan, batch_size: int
    ) -> Iterator[Delivery]:
        """Yield ``plan.num_batches`` batches (fewer after a resume: those after
        ``plan.skip`` samples); the last has ``plan.last_batch_size`` items."""
        sizes = [batch_size] * plan.num_batches
        if sizes:
            sizes[-1] = plan.last_batch_size
        sizes = sizes[plan.first_batch(batch_size) :]
        it = self.decoded(samples)
        if self.spec.output == "encoded":
            yield from self._encoded_batches(it, sizes, plan)
            return
        for n in sizes:
            before, bytes_before = self.replaced, self.bytes_read
            out = Slot(self, n)
            pixels, meta = self._assemble(it, plan, n, out)
            labels: Any = meta.labels
            if labels is not None and out.slot >= 0:
                view, labels = out.tensor(None, torch.int64)
                view.copy_(meta.labels)
            if self.spec.views:
                out_batch: dict[str, Any] = {"views": [out.send(p) for p in pixels]}
            elif self.spec.clips is not None:
                out_batch = {"video": out.send(pixels[0])}
            else:
                out_batch = {"pixel_values": out.send(pixels[0])}
            meta.into(out_batch, labels)
            yield from self._handoff(self._delivery(out_batch, out.slot, before, bytes_before), n)

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

    def _delivery(self, batch: dict[str, Any], slot: int, before: int, nbytes: int) -> Delivery:
        """``batch`` with what this worker counted since ``before`` replaced samples and
        ``nbytes`` bytes read."""
        replaced, where = self.replaced - before, dict(self.replaced_from)
        why = dict(self.replaced_why)
        return Delivery(batch, slot, replaced, where, self.bytes_read - nbytes, why)

    def _assemble(
        self, it: Iterator[Decoded], plan: WorkerPlan, n: int, out: Slot
    ) -> tuple[list[torch.Tensor], BatchMeta]:
        """The next ``n`` samples' pixels as batch tensors (one per view), and the rest of what
        they carry.

        Where a recipe's output size is known its head writes each sample straight into the
        batch buffer (a uint8 scratch when the batch is float: normalized into the buffer at
        the end); a tail's result is copied in. Otherwise the outputs are stacked."""
        output = self.spec.output
        dtype = torch.float32 if output == "float" else torch.uint8
        meta = BatchMeta(n, self)
        finals: list[torch.Tensor | None] = []
        works: list[torch.Tensor | None] = []
        for recipe in self.spec.recipes:
            final = out.tensor(recipe.size, dtype)[0] if recipe.size is not None else None
            finals.append(final)
            # a float recipe writes its float pixels into the slot itself (or they are copied)
            own = final is None or final.dtype == torch.uint8 or recipe.dtype == torch.float32
            works.append(final if own else self._work(n))
        stacked: list[list[torch.Tensor]] = [[] for _ in finals]
        cthw = out.cthw
        for i in range(n):
            # the heads write there (a clip [T,3,h,w]: a view of a [3,T,h,w] row for CTHW)
            self._dest = [None if w is None else _row(w, i, cthw) for w in works]
            got = _next_sample(it, plan)
            self._dest = [None] * len(works)
            for v, img in enumerate(got.image):
                work, final = works[v], finals[v]
                if work is None or final is None:
                    stacked[v].append(img)
                elif img.data_ptr() != work[i].data_ptr():
                    _row(work if img.dtype == torch.uint8 else final, i, cthw).copy_(img)
            meta.add(i, got)
        batches = []
        for v, recipe in enumerate(self.spec.recipes):
            final, work = finals[v], works[v]
            if final is None:
                batch = torch.stack(stacked[v])
                if self.spec.channels_last:  # an opaque transform's images
                    batch = batch.contiguous(memory_format=torch.channels_last)
                if output == "float" and batch.dtype == torch.uint8:
                    batch = normalize(batch)
                batches.append(batch)
                continue
            if work is not final and recipe.dtype == torch.uint8:
                normalize_into(work, final)
            batches.append(final)
        return batches, meta

    def _work(self, n: int) -> torch.Tensor:
        """The uint8 scratch a float batch's heads write into (never shared: the normalized
        float batch leaves the worker)."""
        size = self.spec.recipe.size
        assert size is not None
        if self._scratch is None or tuple(self._scratch.shape) != (n, 3, *size):
            self._scratch = new_batch(n, size, False, torch.uint8, self.spec.channels_last)
        return self._scratch

    def _encoded_batches(
        self, it: Iterator[Decoded], sizes: list[int], plan: WorkerPlan
    ) -> Iterator[Delivery]:
        for n in sizes:
            before, bytes_before = self.replaced, self.bytes_read
            datas: list[bytes] = []
            rows: list[list[int]] = []
            meta = BatchMeta(n, self)
            for i in range(n):
                got = _next_sample(it, plan)
                data, geometry = got.image
                datas.append(data)
                rows.append(to_row(geometry))
                meta.add(i, got)
            offsets = torch.tensor(
                [0, *itertools.accumulate(len(d) for d in datas)], dtype=torch.int64
            )
            joined = bytearray(b"".join(datas))
            out: dict[str, Any] = {
                "encoded": torch.frombuffer(joined, dtype=torch.uint8)
                if joined
                else torch.empty(0, dtype=torch.uint8),
                "offsets": offsets,
                "geometry": torch.tensor(rows, dtype=torch.int64).reshape(n, -1),
            }
            meta.into(out, meta.labels)
            yield from self._handoff(self._delivery(out, -1, before, bytes_before), n)
