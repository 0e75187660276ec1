"""What the kinds that write pixels share: each recipe's head writes a sample straight into
its row of the batch (in the pool slot where its size is known), a tail's result is copied in,
and outputs of an unknown size are stacked (:class:`PixelKind`)."""

from __future__ import annotations

import math
from typing import Any

import torch

from loaders.config import LoaderConfig, Output
from loaders.delivery import BatchMeta, Slot
from loaders.kinds.base import NextSample, OutputKind
from loaders.pool import Layout, image_layout, new_tensor, slot_bytes
from loaders.recipe import Recipe, check_output
from loaders.recipe.normalize import normalize, normalize_into
from wdstool.base.errors import SampleError


def _fmt(shape: tuple[Any, ...]) -> str:
    return f"{str(shape[0]).replace('torch.', '')} {list(shape[1:])}"


class PixelKind(OutputKind):
    """A kind whose payload is one tensor per recipe (per view) of every sample."""

    def __init__(self, config: LoaderConfig, recipes: tuple[Recipe, ...]) -> None:
        super().__init__(config, recipes)
        self.dtype = torch.float32 if config.batch.output is Output.FLOAT else torch.uint8
        self.dest: list[Any] = [None] * len(recipes)  # per recipe: where the head writes
        self._shapes: list[tuple[Any, ...] | None] = [None] * len(recipes)
        self._scratch: torch.Tensor | None = None

    @classmethod
    def layout(cls, config: LoaderConfig, n: int, size: Any) -> Layout:
        """(shape, strides) of a batch of ``n`` outputs of ``size``."""
        return image_layout(n, size, config.batch.channels_last)

    @classmethod
    def slot_bytes(cls, config: LoaderConfig) -> int:
        sizes = config.recipes.largest()  # sized once, for the largest of a size schedule
        if None in sizes:
            return 0
        dtype = torch.float32 if config.batch.output is Output.FLOAT else torch.uint8
        itemsize = torch.empty(0, dtype=dtype).element_size()
        n = config.epoch.batch_size
        pixels = sum(math.prod(cls.layout(config, n, s)[0]) * itemsize for s in sizes)
        return slot_bytes(pixels, n)

    def row(self, batch: torch.Tensor, i: int) -> torch.Tensor:
        """Sample ``i`` of a batch as its recipe writes it."""
        return batch[i]

    def entries(self, sent: list[Any]) -> dict[str, Any]:
        """The batch entries of the (sent) pixel tensors, one per recipe."""
        return {self.pixel_key: sent if self.listed else sent[0]}

    def fill(self, next_sample: NextSample, n: int, out: Slot, meta: BatchMeta) -> dict[str, Any]:
        """Where a recipe's output size is known its head writes each sample straight into the
        batch buffer (a uint8 scratch when the batch is float: normalized into the buffer at
        the end); a tail's result is copied in. Otherwise the outputs are stacked."""
        finals: list[torch.Tensor | None] = []
        works: list[torch.Tensor | None] = []
        for recipe in self.recipes:
            final = None
            if recipe.size is not None:
                final = out.tensor(*self.layout(self.config, n, recipe.size), self.dtype)
            finals.append(final)
            # a float recipe writes its float pixels into the slot itself (or they are copied)
            own = final is None or final.dtype == torch.uint8 or recipe.dtype == torch.float32
            works.append(final if own else self._work(n))
        stacked: list[list[torch.Tensor]] = [[] for _ in finals]
        for i in range(n):
            self.dest = [None if w is None else self.row(w, i) for w in works]
            got = next_sample()
            self.dest = [None] * len(works)
            for v, img in enumerate(got.payload):
                work, final = works[v], finals[v]
                if work is None or final is None:
                    stacked[v].append(img)
                elif img.data_ptr() != work[i].data_ptr():
                    self.row(work if img.dtype == torch.uint8 else final, i).copy_(img)
            meta.add(i, got)
        batches = []
        for v, recipe in enumerate(self.recipes):
            final, work = finals[v], works[v]
            if final is None:
                batch = torch.stack(stacked[v])
                if self.config.batch.channels_last:  # an opaque transform's images
                    batch = batch.contiguous(memory_format=torch.channels_last)
                if self.dtype == torch.float32 and batch.dtype == torch.uint8:
                    batch = normalize(batch)
                batches.append(batch)
                continue
            if work is not final and recipe.dtype == torch.uint8:
                normalize_into(work, final)
            batches.append(final)
        return self.entries([out.send(b) for b in batches])

    def _work(self, n: int) -> torch.Tensor:
        """The uint8 scratch a float batch's heads write into (never shared: the normalized
        float batch leaves the worker)."""
        size = self.recipes[0].size
        shape, stride = self.layout(self.config, n, size)
        if self._scratch is None or tuple(self._scratch.shape) != shape:
            self._scratch = new_tensor(shape, stride, torch.uint8, shared=False)
        return self._scratch

    def check_image(self, img: Any, where: str, view: int) -> None:
        """A transform's output: a [3,H,W] tensor of the dtype ``output`` allows (ConfigError
        otherwise), of the shape and dtype every other sample has (SampleError otherwise)."""
        if img is self.dest[view]:
            return
        if isinstance(img, torch.Tensor) and (img.dtype, *img.shape) == self._shapes[view]:
            return
        check_output(img, where, torch.uint8 if self.config.batch.output is Output.UINT8 else None)
        recipe = self.recipes[view]
        first = self._shapes[view]
        if first is None and recipe.size is not None:
            first = (recipe.dtype, 3, *recipe.size)
        got = (img.dtype, *img.shape)
        if first is not None and got != first:
            name = f"view {view} of the transform" if self.listed else "the transform"
            raise SampleError(
                f"{where}: {name} returned {_fmt(got)} where the other samples are "
                f"{_fmt(first)}; a batch needs one size and dtype"
            )
        self._shapes[view] = got


__all__ = ["PixelKind"]
