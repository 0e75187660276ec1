"""A small real tokenizer, trained here from a few paragraphs (nothing downloaded): byte-level
BPE with ``<pad>``, ``<s>``, ``</s>`` and ``<image>`` as special tokens, a post-processor that
puts ``<s>`` before and ``</s>`` after a sequence (as Llama-style tokenizers do), and padding
with ``<pad>`` recorded in its JSON. Saved as a ``tokenizers`` file (``tokenizer.json``) or as a
transformers ``save_pretrained`` folder; ``CountingFields`` reports which process tokenized a
sample and how many times that process built the tokenizer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# the tokenizer is trained (in parallel) before the loader forks its workers: say so once here
# instead of a warning from every forked worker
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SPECIALS = ["<pad>", "<s>", "</s>", "<image>"]

TEXT = """\
A photo of a cat sitting on a wooden table next to a cup of coffee. The cat looks at the camera.
Two dogs run along the beach at sunset, leaving footprints in the wet sand behind them.
A red bicycle leans against a brick wall covered in ivy; a basket of flowers hangs from it.
The mountain lake reflects the snowy peaks, and a small boat drifts near the shore.
A plate of pasta with tomato sauce and basil, photographed from above on a marble counter.
Children fly a yellow kite in a green park while their parents watch from a bench.
An old stone bridge crosses a quiet river; autumn leaves float on the water below.
A street market at night: lanterns, food stalls and crowds of people walking between them.
""".splitlines()


def train_tokenizer(extra: list[str] | None = None, vocab_size: int = 400) -> Any:
    """A ``tokenizers.Tokenizer`` trained on :data:`TEXT` (and ``extra`` lines)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([*TEXT, *(extra or [])], trainer)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> $B </s>",
        special_tokens=[("<s>", bos), ("</s>", eos)],
    )
    tok.enable_padding(pad_id=tok.token_to_id("<pad>"), pad_token="<pad>")
    return tok


def save_json(path: Path, tok: Any = None) -> Path:
    """The tokenizer as a ``tokenizers`` file at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    (tok or train_tokenizer()).save(str(path))
    return path


def fast_tokenizer(tok: Any = None) -> Any:
    """The tokenizer as a transformers ``PreTrainedTokenizerFast``."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok or train_tokenizer(),
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )


def save_folder(folder: Path, tok: Any = None) -> Path:
    """The tokenizer as a transformers ``save_pretrained`` folder."""
    fast_tokenizer(tok).save_pretrained(str(folder))
    return folder


class CountingFields:
    """A ``fields_fn`` around ``tok.fields(...)`` that adds, per sample, the process that ran it
    (``pid``) and how many times that process had built the tokenizer (``loads``)."""

    def __init__(self, tok: Any, name: str = "caption") -> None:
        self.inner = tok.fields(name)
        self.fingerprint = tok.fingerprint

    def __call__(self, fields: dict[str, Any]) -> dict[str, Any]:
        from loaders.text.process_cache import load_count

        out = self.inner(fields)
        out["pid"] = os.getpid()
        out["loads"] = load_count(self.fingerprint)
        return out
