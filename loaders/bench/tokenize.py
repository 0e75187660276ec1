"""A stand-in tokenizer for benchmarks and examples: what CLIP-style training runs per caption.

Real tokenizers (BPE, SentencePiece) cost more per caption, but the loader's share of the work
is the same: one call per sample in the workers, a fixed-length tensor back, stacked per batch.
For training with a real tokenizer: ``loaders.TextTokenizer`` (``loaders/text/``).
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

VOCAB = 49_408  # CLIP's vocabulary size; ids 1..VOCAB-1, 0 pads


class Tokenize:
    """``fields_fn`` that replaces the text field ``name`` by ``{name}_ids``: its whitespace-split
    words hashed to ids (crc32), truncated or zero-padded to ``length``, as a numpy int64 array
    (the loader stacks arrays and tensors alike into a batch tensor; making a torch tensor per
    caption would cost ~45 us more a sample than the whole tokenizer). The other fields pass
    through. Picklable (a class, not a lambda), so it also works with spawned workers."""

    def __init__(self, name: str = "caption", length: int = 32) -> None:
        self.name = name
        self.length = length

    def __call__(self, fields: dict[str, Any]) -> dict[str, Any]:
        out = dict(fields)
        text = out.pop(self.name, None) or ""
        ids = [zlib.crc32(w.encode()) % (VOCAB - 1) + 1 for w in text.lower().split()]
        row = np.zeros(self.length, dtype=np.int64)
        ids = ids[: self.length]
        row[: len(ids)] = ids
        out[f"{self.name}_ids"] = row
        return out
