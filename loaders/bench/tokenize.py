"""A stand-in tokenizer for benchmarks and examples: what CLIP-style training runs per caption.

Real tokenizers (BPE, SentencePiece) cost more per caption, but the loader's share of the work
is the same: one call per sample in the workers, a fixed-length tensor back, stacked per batch.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

VOCAB = 49_408  # CLIP's vocabulary size; ids 1..VOCAB-1, 0 pads


class Tokenize:
    """``fields_fn`` that replaces the text field ``name`` by ``{name}_ids``: its whitespace-split
    words hashed to ids (crc32), truncated or zero-padded to ``length``; the other fields pass
    through. Picklable (a class, not a lambda), so it also works with spawned workers."""

    def __init__(self, name: str = "caption", length: int = 32) -> None:
        self.name = name
        self.length = length

    def __call__(self, fields: dict[str, Any]) -> dict[str, Any]:
        out = dict(fields)
        text = out.pop(self.name, None) or ""
        ids = [zlib.crc32(w.encode()) % (VOCAB - 1) + 1 for w in text.lower().split()]
        row = torch.zeros(self.length, dtype=torch.int64)
        if ids:
            row[: min(len(ids), self.length)] = torch.tensor(ids[: self.length])
        out[f"{self.name}_ids"] = row
        return out
