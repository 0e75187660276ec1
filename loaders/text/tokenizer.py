"""``TextTokenizer``: a Hugging Face tokenizer as picklable settings, for the loader's workers.

    tok = TextTokenizer("tokenizer.json")            # a tokenizers file
    tok = TextTokenizer("my-tokenizer/")             # a transformers save_pretrained folder
    tok = TextTokenizer(tokenizer_object)            # a tokenizers.Tokenizer, a fast transformers one

What it is given is read and checked where it is made (a missing file, JSON that is not a
tokenizer, an ``image_token`` not in the vocabulary: one-line ``ConfigError``s there, not at the
first batch; :mod:`loaders.text.resolve`). It carries a file's path, or a tokenizer object's
JSON, never the tokenizer: each process builds the tokenizer at its first call and keeps it
(:mod:`loaders.text.process_cache`), so workers and decode threads build it once, not per sample.

Special tokens are the tokenizer's own: what its post-processor puts around a single sequence
(bos/eos, ``[CLS]``/``[SEP]``), once around the whole sample, never between the pieces of an
interleaved one. Padding and truncation set in the tokenizer's file are not used: ``max_length``
cuts (before the special tokens, as the tokenizer's own truncation does), and the loader pads a
batch (``make_loader(pad_fields={"input_ids": tok.pad_id})``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from loaders.text import process_cache
from loaders.text.fields import TokenizeField
from loaders.text.interleave import Encoded, check, lay_out
from loaders.text.resolve import carry
from wdstool.base.errors import ConfigError


class TextTokenizer:
    """A Hugging Face tokenizer for the loader's workers (picklable settings; see the module).

    ``add_special_tokens``: the post-processor's tokens around each sample (default True).
    ``max_length``: at most this many ids a sample, special tokens included (None: no cut).
    ``image_token``: the placeholder of an image in ``encode_interleaved`` (``"<image>"``); it
    must already be in the tokenizer's vocabulary (add it as a special token and save the
    tokenizer, beside the model whose embedding has its row): the loader never changes a
    vocabulary."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        add_special_tokens: bool = True,
        max_length: int | None = None,
        image_token: str | None = None,
    ) -> None:
        if not isinstance(add_special_tokens, bool):
            raise ConfigError("TextTokenizer: add_special_tokens must be True or False")
        if max_length is not None and (
            isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1
        ):
            raise ConfigError(
                f"TextTokenizer: max_length must be a positive int, got {max_length!r}"
            )
        if image_token is not None and (not isinstance(image_token, str) or not image_token):
            raise ConfigError(
                f"TextTokenizer: image_token must be a token (a str), got {image_token!r}"
            )
        self._carried = carry(tokenizer)
        self.add_special_tokens = add_special_tokens
        self.max_length = max_length
        self.image_token = image_token
        loaded = process_cache.loaded(self._carried)  # built here: bad settings fail here
        self.image_token_id: int | None = None
        if image_token is not None:
            self.image_token_id = loaded.tokenizer.token_to_id(image_token)
            if self.image_token_id is None:
                raise ConfigError(
                    f"TextTokenizer: image_token={image_token!r} is not in {self.source}'s "
                    "vocabulary; add it as a special token (tokenizer.add_special_tokens([...])) "
                    "and save the tokenizer with the model whose embedding has its row"
                )
        self.specials = len(loaded.prefix) + len(loaded.suffix) if add_special_tokens else 0
        if max_length is not None and max_length <= self.specials:
            raise ConfigError(
                f"TextTokenizer: max_length={max_length} leaves no room for text beside the "
                f"{self.specials} special tokens {self.source} adds"
            )

    # --- what the settings say ---------------------------------------------------------------
    @property
    def source(self) -> str:
        """The path given, or the kind of tokenizer object."""
        return self._carried.what

    @property
    def fingerprint(self) -> str:
        """sha256 of the tokenizer's JSON: settings over the same tokenizer share one build."""
        return self._carried.digest

    @property
    def pad_id(self) -> int | None:
        """The pad token's id (transformers' ``pad_token_id``, else the tokenizer file's
        padding ``pad_id``); None where the tokenizer names none."""
        return self._carried.pad_id

    @property
    def chat_template(self) -> str | None:
        """The chat template a transformers tokenizer was saved with (None: it has none)."""
        return self._carried.chat_template

    @property
    def template_vars(self) -> dict[str, str]:
        """The special tokens a chat template sees (``bos_token``, ``eos_token``, ...), as
        transformers hands them to its templates."""
        return dict(self._carried.template_vars)

    def encode_plain(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """``text``'s ids without special tokens and each id's character span (what
        ``apply_chat_template`` tokenizes a rendered conversation with)."""
        enc = self._loaded().tokenizer.encode(text, add_special_tokens=False)
        return enc.ids, enc.offsets

    @property
    def vocab_size(self) -> int:
        """Ids the tokenizer can give, added tokens included (the model's embedding rows)."""
        return self._loaded().tokenizer.get_vocab_size(with_added_tokens=True)

    def __repr__(self) -> str:
        return (
            f"TextTokenizer({self.source!r}, add_special_tokens={self.add_special_tokens}, "
            f"max_length={self.max_length}, image_token={self.image_token!r})"
        )

    def _key(self) -> tuple[Any, ...]:
        return (self.fingerprint, self.add_special_tokens, self.max_length, self.image_token)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextTokenizer) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    # --- encoding ----------------------------------------------------------------------------
    def _loaded(self) -> process_cache.Loaded:
        return process_cache.loaded(self._carried)

    def _text_ids(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"TextTokenizer encodes str, not {type(text).__name__}")
        return self._loaded().tokenizer.encode(text, add_special_tokens=False).ids

    def _budget(self) -> int | None:
        return None if self.max_length is None else self.max_length - self.specials

    def _around(self, content: list[int]) -> list[int]:
        if not self.add_special_tokens:
            return content
        loaded = self._loaded()
        return [*loaded.prefix, *content, *loaded.suffix]

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``: the tokenizer's own ``encode(text).ids`` (with its special
        tokens unless ``add_special_tokens=False``), cut to ``max_length`` before them."""
        ids = self._text_ids(text)
        budget = self._budget()
        return self._around(ids if budget is None else ids[:budget])

    def encode_interleaved(
        self, segments: Sequence[str | int], image_tokens: Sequence[int], *, tensors: bool = True
    ) -> Encoded:
        """One sample of text and images in order (OBELICS-style): ``segments`` items are str
        (text) or int (image index), ``image_tokens[i]`` the placeholder tokens image ``i``
        takes (from its output size, by the caller). Each image becomes a run of
        ``image_token`` ids; text is tokenized without special tokens, and the special tokens
        go once around the whole. ``max_length`` cuts text at the limit and never cuts an
        image's run: the sample ends before an image that does not fit, which is dropped with
        every later one (``Encoded.images_dropped``). ``input_ids`` is an int64 tensor
        (``tensors=False``: a list). ValueError for segments that do not match image_tokens."""
        check(segments, image_tokens)
        if self.image_token_id is None and any(not isinstance(s, str) for s in segments):
            raise ConfigError(
                "TextTokenizer: encode_interleaved with images needs image_token= (e.g. '<image>')"
            )
        layout = lay_out(
            segments, image_tokens, self._text_ids, self.image_token_id or 0, self._budget()
        )
        ids = self._around(layout.ids)
        shift = len(self._loaded().prefix) if self.add_special_tokens else 0
        return Encoded(
            input_ids=torch.tensor(ids, dtype=torch.int64) if tensors else ids,
            images=layout.images,
            placeholders=tuple((start + shift, n) for start, n in layout.runs),
            images_dropped=layout.dropped,
            length=len(ids),
        )

    def fields(
        self, name: str = "caption", to: str = "input_ids", *, keep: bool = False
    ) -> TokenizeField:
        """A picklable ``fields_fn``: each sample's ``name`` field (text) -> ``to``, its ids as
        an int64 tensor [L]; the other fields pass through (``keep=True``: the text too).
        Batch different lengths with ``make_loader(pad_fields={to: tok.pad_id})``."""
        return TokenizeField(self, name, to, keep)
