"""Interleaved samples packed to a token budget (``Interleaved(packing=Packing(length=L))``):
each batch is ``batch_size`` sequences of at most L tokens, planned exactly before the epoch
(``loaders.plan.packed_epoch``, from every sample's length: ``loaders.interleaved.lengths``), so the
sequences are the same for any number of workers, every rank takes the same number of steps,
and a resume, on the same or another topology, continues exactly (docs/design/packing.md).

A batch: ``input_ids`` [B,L] (the tokenizer's pad id after the last sample of a row),
``position_ids`` [B,L] (restarting at 0 at each sample), ``loss_mask`` [B,L] (True on the text
tokens of samples: False on padding and image placeholders), ``cu_seqlens`` int32 (the
boundaries of every sample, and of each row's padding, over the flattened [B*L] tokens: what
variable-length attention takes) and ``max_seqlen``, ``keys`` and ``sample_row`` (each packed
sample and its row), and the images as the interleaved kind gives them, with ``image_row``
(the row) and ``image_spans`` (the placeholder run's start in its row, and its length). With
``Packing(overflow="split")`` a piece of a long sample is a sample here (its own positions,
boundary, key and row); an image whose run a truncation or a piece boundary cuts is dropped
and its run's tokens left in a row are the pad id (``Packing``'s docstring).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from loaders.config import LoaderConfig
from loaders.delivery import BatchMeta, Slot
from loaders.interleaved import Interleaved, Packing
from loaders.interleaved.lengths import sample_lengths
from loaders.interleaved.sample_parts import IGNORE
from loaders.kinds.base import NextSample
from loaders.kinds.interleaved import InterleavedKind, flat_images
from loaders.plan import Mixture, Slice
from loaders.plan.packed_epoch import (
    PackedData,
    PackSpec,
    plan_packed,
    plan_packed_resumed,
    shard_starts,
    unit_sample,
)
from loaders.read import Located, ReadRun, read_items
from loaders.recipe import Seeder
from wdstool.base import counters
from wdstool.base.errors import ConfigError

log = logging.getLogger(__name__)


class PackedKind(InterleavedKind):
    name = "packed"
    keys = (
        "input_ids",
        "position_ids",
        "loss_mask",
        "cu_seqlens",
        "max_seqlen",
        "sample_row",
        "images",
        "image_sizes",
        "image_row",
        "image_spans",
    )
    adds_fields = False
    plans_itself = True

    def __init__(self, config: LoaderConfig, recipes: tuple[Any, ...]) -> None:
        super().__init__(config, recipes)
        self.layouts: Iterator[Any] = iter(())

    @staticmethod
    def applies(config: LoaderConfig) -> bool:
        return isinstance(config.sample, Interleaved) and config.sample.packing is not None

    @classmethod
    def settle(cls, sources: Sequence[Any], config: LoaderConfig) -> tuple[list[Any], LoaderConfig]:
        """The sources with their numbered images read and every sample's length in tokens
        computed (or found kept on this host); a mixture's weights in tokens
        (``Packing(weights_in="tokens")``) made weights in samples, each divided by its source's
        mean tokens a sample (:func:`mean_tokens`)."""
        if config.sample.chat is not None and any(s.schema.label is not None for s in sources):
            raise ConfigError(
                "Interleaved(chat=..., packing=...): a batch's labels are the tokens' (-100 "
                "outside the loss); pass label=None"
            )
        if config.repeats != 1 or config.epoch_size is not None:
            raise ConfigError(
                "Interleaved(packing=...): repeats and epoch_size are not offered yet"
            )
        spec: Interleaved = config.sample
        if spec.native is None and config.recipes.schedule is not None:
            raise ConfigError(
                "Interleaved(packing=...): a size schedule changes every image's tokens each "
                "epoch; give one image_size, or native=NativeResolution(...)"
            )
        size = None if spec.native is not None else config.recipes.at(0)[0].size
        skip = config.batch.on_error.value == "skip"
        p = spec.packing
        assert p is not None
        out = []
        for source in sources:
            src = replace(source, schema=replace(source.schema, numbered=True))
            out.append(
                replace(src, lengths=sample_lengths(src.reader(), spec, size, skip_bad=skip))
            )
        lengths = np.concatenate([s.lengths for s in out])
        long = int((lengths > p.length).sum())
        if long:
            what = {
                "truncate": "truncated to their first",
                "split": "split into pieces of at most",
                "drop": "dropped: longer than",
            }[p.overflow]
            log.warning(
                "packing: %d of %d samples (%.1f%%) will be %s %d tokens (overflow=%r)",
                long, len(lengths), 100 * long / len(lengths), what, p.length, p.overflow,
            )  # fmt: skip
        if p.weights_in == "tokens" and len(out) > 1:
            out = [
                replace(s, weight=s.weight / mean_tokens(s.lengths, p, n))
                for n, s in enumerate(out)
            ]
        return out, config

    # --- the plan ------------------------------------------------------------------------
    @classmethod
    def epoch_plan(cls, dataset: Any, spec: Any, resume: Any) -> Any:
        """This rank's packed plan of the epoch of ``spec`` (the rest of it after ``resume``):
        over the loader's mixture, or the one the interrupted epoch was planned with."""
        p = dataset.config.sample.packing
        pack = PackSpec(
            capacity=p.length,
            rows=spec.batch_size,
            window=p.window,
            method=p.method,
            open_sequences=p.open_sequences,
            overflow=p.overflow,
        )
        if resume is None:
            lengths = np.concatenate([s.lengths for s in dataset.sources])
            data = PackedData.of(dataset.mixture, lengths)
            return plan_packed(data, spec, pack, dataset.topology)
        # the interrupted epoch's sources (a data set appended to since: the version it was
        # planned on, whose samples are the data set's first)
        lengths = np.concatenate(
            [
                dataset.sources[i].lengths[: src.num_samples]
                for i, src in zip(resume.sources, resume.mixture.sources, strict=True)
            ]
        )
        data = PackedData.of(resume.mixture, lengths)
        return plan_packed_resumed(data, resume.history, spec, pack, dataset.topology)

    @classmethod
    def worker_samples(
        cls, wplan: Any, mixture: Mixture, read_run: ReadRun, remote: Sequence[bool]
    ) -> tuple[Iterator[Located], list[int], list[Any]]:
        """A plan worker's samples in the order its remaining batches hold them, the number of
        entries of each of those batches, and the batches' rows (``mixture``: the one the plan
        was made over; ``remote``: which of its sources are remote). Of each window it has
        batches of, the samples of those batches are read once, in the rank's order, each
        from its source with its rep, and held by unit until its batches of the window are
        made (:meth:`_Where.read`)."""
        where = _Where(mixture)
        batches = wplan.batches()[wplan.skip :]
        owner = wplan.owners()[wplan.skip :]
        counts = [sum(len(row) for row in b) for b in batches]
        wanted: dict[int, set[int]] = {}  # window -> the units of its remaining batches
        for batch, g in zip(batches, owner, strict=True):
            if g >= 0:
                wanted.setdefault(g, set()).update(u for row in batch for u, _o, _t in row)

        def stream() -> Iterator[Located]:
            held: dict[int, Located] = {}
            reading = -1
            for batch, g in zip(batches, owner, strict=True):
                if g != reading and g >= 0 and any(batch):  # the window's units, read once
                    held = where.read(wplan.windows[g].ids, read_run, wanted[g], remote)
                    reading = g
                for row in batch:
                    for unit, _offset, _tokens in row:
                        yield held[unit]

        return stream(), counts, batches

    # --- in the worker ---------------------------------------------------------------------
    def decode(
        self, loc: Located, rng: random.Random, seeder: Seeder, where: str
    ) -> tuple[Any, dict[str, Any] | None]:
        # a split sample is decoded once per piece: what decoding dropped is counted by the
        # piece at its token 0 (:meth:`fill`)
        (images, spans), fields, dropped = self.decode_counted(loc, rng, seeder, where)
        mask = fields.get("loss_mask")  # a conversation's (loaders.text.chat)
        return (images, spans, fields["input_ids"], dropped, mask), None

    def fill(self, next_sample: NextSample, n: int, out: Slot, meta: BatchMeta) -> dict[str, Any]:
        rows = next(self.layouts)
        spec: Interleaved = self.spec
        L, B = spec.packing.length, len(rows)  # type: ignore[union-attr]
        split = spec.packing.overflow == "split"  # type: ignore[union-attr]
        tok = spec.tokenizer
        assert tok is not None
        pad = int(spec.pad_id)
        ids = torch.full((B, L), pad, dtype=torch.int64)
        pos = torch.zeros((B, L), dtype=torch.int64)
        loss = torch.zeros((B, L), dtype=torch.bool)
        starts: list[tuple[int, int]] = []  # (row, column) where each entry begins
        model = spec.model  # a model family (loaders.families) and its own positions
        rope = torch.zeros((B, 3, L), dtype=torch.int64) if model and model.positions_key else None
        cu, longest = [0], 0
        sample_row: list[int] = []
        images: list[torch.Tensor] = []
        image_row: list[int] = []
        image_spans: list[tuple[int, int]] = []
        i = 0
        for r, row in enumerate(rows):
            at = 0
            for _unit, offset, count in row:
                got = next_sample()
                kept, spans, sample_ids, dropped, sample_mask = got.payload
                if offset == 0 and dropped:
                    counters.count("images_dropped", dropped)
                # the entry: tokens [offset, offset + count) of the sample (all of it, its
                # first L, or one piece of a split sample)
                piece = sample_ids[offset : offset + count][: L - at]
                take = len(piece)
                end = offset + take
                ids[r, at : at + take] = piece
                pos[r, at : at + take] = torch.arange(take)
                if sample_mask is not None:  # a conversation's: its replies (loaders.text.chat)
                    loss[r, at : at + take] = sample_mask[offset:end]
                else:
                    loss[r, at : at + take] = piece != tok.image_token_id
                if take:
                    starts.append((r, at))
                first_image = len(images)
                for img, (start, length) in zip(kept, spans, strict=True):
                    stop = start + length
                    if offset <= start and stop <= end:  # its whole run is in this entry
                        images.append(img)
                        image_row.append(r)
                        image_spans.append((at + start - offset, length))
                        continue
                    # a run the entry's ends cut: the image is dropped, and the part of its run
                    # the entry holds is padding (no image token without its image)
                    lo, hi = max(start, offset), min(stop, end)
                    if lo < hi:
                        ids[r, at + lo - offset : at + hi - offset] = pad
                    # counted once: by the piece its run starts in (truncated: by the entry)
                    if offset <= start < end or (not split and start >= end):
                        counters.count("images_dropped", 1)
                if rope is not None and take:  # the entry's positions, as if alone
                    mine = range(first_image, len(images))
                    rope[r, :, at : at + take] = model.positions(
                        ids[r, at : at + take],
                        [(image_spans[j][0] - at, image_spans[j][1]) for j in mine],
                        [tuple(images[j].shape[1:]) for j in mine],
                    )
                sample_row.append(r)
                meta.add(i, got)
                i += 1
                if take:
                    at += take
                    cu.append(cu[-1] + take)
                    longest = max(longest, take)
            if at < L:  # the row's padding: a segment of its own
                cu.append(cu[-1] + L - at)
                longest = max(longest, L - at)
        flat = flat_images(images, out, getattr(model, "into", None))
        out_batch: dict[str, Any] = {}
        if rope is not None:
            out_batch[model.positions_key] = rope
        if spec.chat is not None:
            # token labels: -100 outside the loss, and where an entry begins (its first token
            # is no target of the sample before it in the row)
            labels = ids.masked_fill(~loss, IGNORE)
            for r, at in starts:
                labels[r, at] = IGNORE
            out_batch["labels"] = labels
        return {
            **out_batch,
            "input_ids": ids,
            "position_ids": pos,
            "loss_mask": loss,
            "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
            "max_seqlen": longest,
            "sample_row": torch.tensor(sample_row, dtype=torch.int64),
            "images": flat,
            "image_sizes": torch.tensor(
                [list(im.shape[1:]) for im in images], dtype=torch.int64
            ).reshape(len(images), 2),
            "image_row": torch.tensor(image_row, dtype=torch.int64),
            "image_spans": torch.tensor(image_spans, dtype=torch.int64).reshape(len(images), 2),
        }


def mean_tokens(lengths: np.ndarray, p: Packing, n: int = 0) -> float:
    """The mean tokens a sample of source ``n`` puts in the batches: its length, cut to
    ``p.length`` (overflow="truncate"), whole (overflow="split") or 0 when over it
    (overflow="drop")."""
    cut = {"truncate": p.length, "split": lengths, "drop": 0}[p.overflow]
    put = np.where(lengths > p.length, cut, lengths)
    mean = float(put.mean()) if len(put) else 0.0
    if mean <= 0:
        raise ConfigError(
            f"Packing(weights_in='tokens'): source[{n}] puts no tokens in the batches (every "
            f"sample is longer than length={p.length}, overflow='drop')"
        )
    return mean


class _Where:
    """Where a unit's sample lies: its source, shard and index, and its rep."""

    def __init__(self, mixture: Mixture) -> None:
        starts = shard_starts(mixture)
        self.samples = mixture.num_samples
        self.firsts = np.concatenate(starts)  # every shard's first sample id, source by source
        self.source = np.concatenate([np.full(len(s), i) for i, s in enumerate(starts)])
        self.shard = np.concatenate([np.arange(len(s)) for s in starts])

    def read(
        self, units: Sequence[int], read_run: ReadRun, keep: set[int], remote: Sequence[bool]
    ) -> dict[int, Located]:
        """The samples of ``keep``, of one window's units (in read order), by unit. Of a source
        on a local disk the window's runs are read as they lie, the others passed over by their
        headers (their images are never read); of a remote source (``remote``, by source) only
        the kept samples are asked for, a ranged read from each run's first sample's offset,
        so the workers sharing a window fetch each byte once between them."""
        ids = np.asarray(units, dtype=np.int64)
        if not len(ids):
            return {}
        samples, reps = unit_sample(ids, self.samples)
        g = np.searchsorted(self.firsts, samples, side="right") - 1
        slices: list[Slice] = []
        read: list[int] = []  # the units read, in order
        for unit, source, shard, index, rep in zip(
            ids.tolist(),
            self.source[g].tolist(),
            self.shard[g].tolist(),
            (samples - self.firsts[g]).tolist(),
            reps.tolist(),
            strict=True,
        ):
            if remote[source] and unit not in keep:
                continue
            read.append(unit)
            last = slices[-1] if slices else None
            if last is not None and (last.source, last.shard, last.rep, last.stop) == (
                source, shard, rep, index
            ):  # fmt: skip
                slices[-1] = Slice(shard, last.start, index + 1, source, rep)
            else:
                slices.append(Slice(shard, index, index + 1, source, rep))
        out: dict[int, Located] = {}
        n = 0
        for unit, loc in zip(read, read_items(slices, read_run), strict=False):
            n += 1
            if unit in keep:
                out[unit] = loc
        if n != len(read):
            raise ConfigError(f"internal error: read {n} samples of a window's {len(read)}")
        return out


__all__ = ["PackedKind"]
