"""``TextTokenizer(...).fields("caption")``: a ``fields_fn`` that tokenizes one text field in the
workers, so a CLIP-style job needs no class of its own:

    make_loader(src, label=None, fields={"caption": "txt"},
                fields_fn=tok.fields("caption"), pad_fields={"input_ids": tok.pad_id})

Picklable (it carries the tokenizer's settings, never the tokenizer)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from loaders.schema import RESERVED
from wdstool.base.errors import ConfigError


class Encodes(Protocol):
    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class TokenizeField:
    """Sample fields -> the same fields with ``name`` replaced by ``to``: its token ids, an int64
    tensor [L] (``keep=True`` keeps the text too). A sample whose field is not text (its
    member missing: ``None``) raises, which makes it a bad sample (``on_error``)."""

    tokenizer: Encodes
    name: str = "caption"
    to: str = "input_ids"
    keep: bool = False

    def __post_init__(self) -> None:
        for what, value in (("name", self.name), ("to", self.to)):
            if not isinstance(value, str) or not value.isidentifier():
                raise ConfigError(f"TextTokenizer.fields: {what}={value!r} is not a field name")
        if self.to in RESERVED:
            raise ConfigError(
                f"TextTokenizer.fields: to={self.to!r} is a batch key the loader fills itself"
            )
        if self.keep and self.to == self.name:
            raise ConfigError("TextTokenizer.fields: keep=True needs to= another name than name=")

    def __call__(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        text = fields.get(self.name)
        if not isinstance(text, str):
            raise ValueError(
                f"field {self.name!r} is {type(text).__name__}, not text (a sample without its "
                "member is None)"
            )
        out = {k: v for k, v in fields.items() if self.keep or k != self.name}
        # numpy first: ~4x cheaper per sample than torch.tensor(list) for short lists
        out[self.to] = torch.from_numpy(np.asarray(self.tokenizer.encode(text), dtype=np.int64))
        return out
