"""Encoded output, for a device-side decoder (``output="encoded"``, ``loaders.DeviceDecoder``):
the workers check each image up to its header and draw the recipe's geometry; batches carry
the bytes (``encoded`` uint8, ``offsets``) and ``geometry`` [B,G] int64."""

from __future__ import annotations

import itertools
import random
from typing import Any

import torch

from loaders.config import LoaderConfig, Output
from loaders.delivery import BatchMeta, Slot
from loaders.kinds.base import NextSample, OutputKind, image_part
from loaders.read import Located
from loaders.recipe import Seeder, to_row


class EncodedKind(OutputKind):
    name = "encoded"
    pixel_key = "encoded"
    keys = ("encoded", "offsets", "geometry")
    wraps_errors = False  # the header checks name the sample themselves

    @staticmethod
    def applies(config: LoaderConfig) -> bool:
        return config.batch.output is Output.ENCODED

    def decode(
        self, loc: Located, rng: random.Random, seeder: Seeder, where: str
    ) -> tuple[Any, dict[str, Any] | None]:
        data = image_part(loc)
        return (data, self.recipes[0].draw(data, rng, where=where)), None

    def fill(self, next_sample: NextSample, n: int, out: Slot, meta: BatchMeta) -> dict[str, Any]:
        datas: list[bytes] = []
        rows: list[list[int]] = []
        for i in range(n):
            got = next_sample()
            data, geometry = got.payload
            datas.append(data)
            rows.append(to_row(geometry))
            meta.add(i, got)
        offsets = torch.tensor([0, *itertools.accumulate(len(d) for d in datas)], dtype=torch.int64)
        joined = bytearray(b"".join(datas))
        return {
            "encoded": torch.frombuffer(joined, dtype=torch.uint8)
            if joined
            else torch.empty(0, dtype=torch.uint8),
            "offsets": offsets,
            "geometry": torch.tensor(rows, dtype=torch.int64).reshape(n, -1),
        }


__all__ = ["EncodedKind"]
