"""Megatron-Energon's pipeline for bench/vlm_packing_bench.py (imported there, in the energon run
only): a cooker for wdstool's interleaved layout and a ``TaskEncoder`` that packs.

The data folder is a ``CrudeWebdataset`` (``energon prepare DIR --non-interactive --split-parts
'train:.*\\.tar' --sample-type CrudeWebdataset``), read with the task encoder's ``decoder = None``
so that the cooker gets each member's bytes:

- ``cook``: ``KEY.json``'s parallel ``texts``/``images`` lists -> the sample's order of text and
  images and its images' bytes;
- ``preencode_sample``: each image's output size from its header and the sample's token ids
  (its length; no pixels decoded: energon's pre/post-encode split keeps the heavy work for
  samples already packed, and a buffer of undecoded samples small);
- ``select_samples_to_pack``: the ``packing_buffer_size`` samples of a buffer packed best-fit
  (the same function as wdstool's plan) into rows;
- ``postencode_sample``: the images of the samples a row holds, decoded and resized;
- ``pack_selected_samples``: the row laid out (ids, positions, placeholder runs);
- ``batch``: rows stacked into a batch with wdstool's keys.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from megatron.energon import Cooker, Sample, TaskEncoder, basic_sample_keys, edataclass, stateless
from vlm_packing_bench import Rule, collate_rows, header_size, lay_row, pack_buffer, segments_of


@edataclass
class Document(Sample):
    """A cooked sample: its order (text, or an image's index) and its images' bytes."""

    segments: list[Any]
    images: list[Any]


@edataclass
class Encoded(Sample):
    """A sample's token ids, each image's placeholder run and output size, its images (bytes
    before ``postencode_sample``, uint8 [3,h,w] after) and its length in tokens."""

    ids: list[int]
    runs: list[Any]
    sizes: list[Any]
    images: list[Any]
    length: int


@edataclass
class Row(Sample):
    """One packed row (``lay_row``'s dict)."""

    row: dict[str, Any]


@stateless
def cook(sample: dict[str, Any]) -> Document:
    meta = json.loads(sample["json"])
    segments, names = segments_of(meta)
    return Document(
        **basic_sample_keys(sample), segments=segments, images=[sample[n] for n in names]
    )


class PackingEncoder(TaskEncoder):  # type: ignore[type-arg]
    cookers: ClassVar[list[Cooker[Any]]] = [Cooker(cook)]
    decoder = None  # members as bytes: the cooker and the encoder decode

    def __init__(self, rule: Rule, length: int, open_sequences: int) -> None:
        self.rule, self.length, self.open_sequences = rule, length, open_sequences

    @stateless
    def preencode_sample(self, sample: Document) -> Encoded:
        sizes = [self.rule.out_size(*header_size(b)) for b in sample.images]
        ids, runs = self.rule.encode(sample.segments, sizes)
        return Encoded.derive_from(
            sample, ids=ids, runs=runs, sizes=sizes, images=sample.images, length=len(ids)
        )

    def select_samples_to_pack(self, samples: list[Encoded]) -> list[list[Encoded]]:
        groups = pack_buffer([s.length for s in samples], self.length, self.open_sequences)
        return [[samples[i] for i in group] for group in groups]

    @stateless
    def postencode_sample(self, sample: Encoded) -> Encoded:
        images = [
            self.rule.decode(data, tuple(size))
            for data, size in zip(sample.images, sample.sizes, strict=True)
        ]
        return Encoded.derive_from(
            sample, ids=sample.ids, runs=sample.runs, sizes=sample.sizes, images=images,
            length=sample.length,
        )  # fmt: skip

    @stateless
    def pack_selected_samples(self, samples: list[Encoded]) -> Row:
        rule = self.rule
        members = [(s.__key__, s.ids, s.runs, s.images) for s in samples]
        return Row.derive_from(samples[0], row=lay_row(members, self.length, rule.pad, rule.image))

    @stateless
    def batch(self, rows: list[Row]) -> dict[str, Any]:
        return collate_rows([r.row for r in rows])


def task_encoder(rule: Rule, length: int, open_sequences: int) -> PackingEncoder:
    rule.tok  # noqa: B018  (built before the workers fork: the special tokens' ids)
    return PackingEncoder(rule, length, open_sequences)
