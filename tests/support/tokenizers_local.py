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


# Chat templates of two shapes, each with and without {% generation %} around the replies
# (TRL's assistant_only_loss templates mark them so): ChatML as Qwen2-VL writes it (an image
# part as <|vision_start|><|image_pad|><|vision_end|>) and a Llama-3-style header template
# (bos first, an image part as <image>, each message trimmed, <|eot_id|> closing a turn).
CHATML_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>",
                   "<|vision_end|>"]  # fmt: skip
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>"]  # fmt: skip
IMAGE_MARKUP = {"chatml": "<|vision_start|><|image_pad|><|vision_end|>", "llama3": "<image>"}
_PARTS = (
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}IMAGE"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
)
TEMPLATES = {
    "chatml": (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
        "{% if message['role'] == 'assistant' %}GEN{{ '<|im_end|>' }}ENDGEN{{ '\\n' }}"
        "{% else %}" + _PARTS + "{{ '<|im_end|>\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
    "llama3": (
        "{{ bos_token }}{% for message in messages %}"
        "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
        "{% if message['role'] == 'assistant' %}GEN{{ '<|eot_id|>' }}ENDGEN"
        "{% else %}" + _PARTS + "{{ '<|eot_id|>' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
    ),
}


def chat_template(style: str, generation: bool) -> str:
    """The template of ``style``, its replies marked with {% generation %} or not."""
    text = TEMPLATES[style].replace("GEN", "GENERATION" + _PARTS, 1)
    start, end = ("{% generation %}", "{% endgeneration %}") if generation else ("", "")
    text = text.replace("GENERATION", start).replace("ENDGEN", end)
    return text.replace("IMAGE", IMAGE_MARKUP[style])


def chat_folder(folder: Path, style: str, generation: bool) -> Path:
    """A transformers tokenizer with a chat template of ``style``, saved to ``folder``; its
    image placeholder: ``<|image_pad|>`` (ChatML) or ``<image>`` (Llama-3 style)."""
    from transformers import PreTrainedTokenizerFast

    specials = CHATML_SPECIALS if style == "chatml" else LLAMA3_SPECIALS
    tok = train_tokenizer(["user assistant system", *specials], vocab_size=500)
    tok.add_special_tokens(specials)
    bos = "<s>" if style == "chatml" else "<|begin_of_text|>"
    if style == "llama3":
        tok.add_special_tokens([bos])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=bos, eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = chat_template(style, generation)
    fast.save_pretrained(str(folder))
    return folder


def image_token(style: str) -> str:
    return "<|image_pad|>" if style == "chatml" else "<image>"
