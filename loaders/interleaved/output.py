"""``Interleaved``: a loader whose samples are several images and text.

``make_loader(src, output=Interleaved(...))``: every image of a sample goes through the loader's
recipe (``transform`` / ``image_size``, seeded per sample, occurrence and image index) or, with
``native=NativeResolution(...)``, is kept near its own size. A batch's images cross as one flat
uint8 buffer (``images``: each image's [3,h,w] pixels one after another, no padding) with
``image_sizes`` [N,2] (h, w) and ``image_owner`` [N] (the sample of the batch each belongs
to); ``segments`` lists each sample's order of text and images (a str, or an image's index in
the sample); ``loaders.split_images(batch)`` gives the images back as tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from loaders.interleaved.native import NativeResolution
from loaders.text import TextTokenizer
from loaders.text.chat import Chat, renderer_for
from loaders.text.interleave import Encoded
from wdstool.base.errors import ConfigError
from wdstool.format.conversation import lists_of


def _is_messages(content: Any) -> bool:
    return bool(content) and isinstance(content[0], dict)


def _segments(messages: Any) -> list[str | int]:
    """A conversation's contents in reading order as segments (text, or image index)."""
    texts, _ = lists_of(messages)
    out: list[str | int] = []
    n = 0
    for t in texts:
        if t is None:
            out.append(n)
            n += 1
        else:
            out.append(t)
    return out


@dataclass(frozen=True, kw_only=True)
class Packing:
    """Samples packed into sequences of at most ``length`` tokens, ``batch_size`` sequences a
    batch (docs/design/packing.md), ``window`` consecutive samples of the rank's share at a
    time (larger: less padding, more memory a worker and a later first batch; the rank's
    batches are dealt to its workers one at a time, so a window of any size keeps every
    worker busy), by ``method``:

    - ``"best_fit_decreasing"`` (the default): the window's samples sorted longest first, each
      into the sequence with the least room that fits it, every sequence of the window open,
      the sequences then put in a seeded order (a shuffled epoch): about a third of the
      online methods' padding at ``window=1024`` on a LLaVA-like mix
      (``bench/results/packing.md``), since the lengths are known before the window is read;
    - ``"best_fit"``, ``"first_fit"``: online over the window's (shuffled) order, at most
      ``open_sequences`` open at once (Grain's and Energon's way).

    A sample longer than ``length`` is, by ``overflow``, and counted:

    - ``"truncate"`` (the default): its first ``length`` tokens;
    - ``"split"``: cut at token offsets 0, L, 2L, ... into pieces of at most L tokens, each its
      own segment of its row (``input_ids`` the sample's tokens [offset, offset + count),
      ``position_ids`` from 0, a ``cu_seqlens`` boundary, ``keys``/``sample_row`` naming the
      sample once per piece). A sample's pieces may land in different rows, batches and
      workers; every token of every sample is delivered once per epoch, a resume included;
    - ``"drop"``: left out of the epoch.

    An image goes with the entry (the sample, its first L tokens, or a piece) that holds its
    whole placeholder run; one whose run a cut falls in (the truncation, or a boundary between
    two pieces) is dropped, counted once in ``images_dropped``, and the tokens of its run
    left in the rows are the tokenizer's pad id, out of the loss: the image tokens of
    ``input_ids`` are exactly the delivered images' runs (``image_spans``).

    ``weights_in``: what the weights of a mixture (``[Source(url, weight=...), ...]``) share out.
    ``"samples"`` (the default, as for image mixtures): source i's weight w_i is its share of
    the epoch's samples, ``apportion(N, w)`` (N: the sources' samples together; largest
    remainders). ``"tokens"``: w_i is its share of the epoch's tokens; the loader plans with
    sample weights w_i / m_i, m_i the mean tokens a sample of source i puts in the batches (its
    length cut to ``length``, whole with ``overflow="split"``, or 0 for a sample over it with
    ``overflow="drop"``, over all the source's samples), so source i's samples are
    ``s_i = apportion(N, [w_j / m_j])`` and its expected tokens ``s_i * m_i`` are
    ``N w_i / sum_j(w_j / m_j)`` within one ``m_i`` (the rounding of s_i; exact tokens where
    the source is read in whole passes). One source: no effect."""

    length: int
    window: int = 1024
    open_sequences: int | None = 64
    method: str = "best_fit_decreasing"
    overflow: str = "truncate"
    weights_in: str = "samples"

    def __post_init__(self) -> None:
        for name in ("length", "window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"Packing: {name} must be an int >= 1, got {v!r}")
        if self.method not in ("best_fit_decreasing", "best_fit", "first_fit"):
            raise ConfigError(
                "Packing: method is 'best_fit_decreasing', 'best_fit' or 'first_fit', got "
                f"{self.method!r}"
            )
        if self.overflow not in ("truncate", "split", "drop"):
            raise ConfigError(
                f"Packing: overflow is 'truncate', 'split' or 'drop', got {self.overflow!r}"
            )
        if self.weights_in not in ("samples", "tokens"):
            raise ConfigError(
                f"Packing: weights_in is 'samples' or 'tokens', got {self.weights_in!r}"
            )


@dataclass(frozen=True, kw_only=True)
class Interleaved:
    """Samples of several images and text (see the module's docstring). ``max_images``: the
    images kept per sample (its first ones, the rest and their places in ``segments`` dropped
    and counted); None: all."""

    native: NativeResolution | None = None
    max_images: int | None = None
    tokenizer: TextTokenizer | None = None
    image_tokens: Callable[[int, int], int] | None = None  # picklable: run in the workers
    packing: Packing | None = None
    # conversations rendered by the chat template, with a loss mask (loaders.text.chat)
    chat: Chat | None = None
    # a model family's inputs (loaders.families: Qwen2VL, Llava): its images, placeholders,
    # positions; ``model_inputs(batch, device)`` then gives what the model takes
    model: Any = None

    def __post_init__(self) -> None:
        if self.model is not None:
            if not hasattr(self.model, "model_inputs"):
                raise ConfigError(
                    f"Interleaved: model={self.model!r}: give a loaders.families model family "
                    "(Qwen2VL.from_processor(...), Llava.from_processor(...))"
                )
            if self.native is not None or self.image_tokens is not None:
                raise ConfigError(
                    "Interleaved: model= sets the images' sizes and tokens (its processor's); "
                    "leave native= and image_tokens= unset"
                )
            if self.tokenizer is None:
                raise ConfigError("Interleaved: model= needs tokenizer= (its placeholders)")
            object.__setattr__(self, "native", getattr(self.model, "native", None))
            object.__setattr__(self, "image_tokens", self.model.tokens)
        if self.chat is not None:
            if not isinstance(self.chat, Chat):
                raise ConfigError(f"Interleaved: chat={self.chat!r}: give a loaders.Chat(...)")
            if self.tokenizer is None:
                raise ConfigError("Interleaved: chat needs tokenizer= (the chat template's)")
        if self.tokenizer is not None:
            if not isinstance(self.tokenizer, TextTokenizer):
                raise ConfigError(
                    f"Interleaved: tokenizer={self.tokenizer!r}: give a loaders.TextTokenizer"
                )
            if self.tokenizer.image_token_id is None:
                raise ConfigError(
                    "Interleaved: the tokenizer needs image_token= (e.g. '<image>'), the "
                    "placeholder of each image in a sample's ids"
                )
        if self.packing is not None:
            if not isinstance(self.packing, Packing):
                raise ConfigError(
                    f"Interleaved: packing={self.packing!r}: give a loaders.Packing(length=...)"
                )
            if self.tokenizer is None:
                raise ConfigError("Interleaved: packing needs tokenizer= (lengths are in tokens)")
        if self.image_tokens is not None and not callable(self.image_tokens):
            raise ConfigError("Interleaved: image_tokens must be a function (height, width) -> int")
        if self.native is not None and not isinstance(self.native, NativeResolution):
            raise ConfigError(
                f"Interleaved: native={self.native!r}: give a loaders.NativeResolution(...)"
            )
        m = self.max_images
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 0):
            raise ConfigError(f"Interleaved: max_images must be an int >= 0, got {m!r}")
        if self.chat is not None:
            renderer_for(self.tokenizer, self.chat).check()  # a template that cannot: here

    def encode(self, content: Any, counts: Sequence[int], where: str) -> Encoded:
        """One sample's ids: a conversation's (``content`` its messages) rendered by the chat
        template with its loss mask, where ``chat`` is set; else its segments (or a
        conversation's contents in reading order) laid out by the tokenizer. ``counts``: each
        image's placeholder tokens. ``max_length`` cuts either, never an image's run."""
        tok = self.tokenizer
        assert tok is not None
        if self.chat is None or not _is_messages(content):
            segments = content if not _is_messages(content) else _segments(content)
            return tok.encode_interleaved(segments, counts)
        got = renderer_for(tok, self.chat).encode(content, counts, where)
        ids, mask, runs = got.ids, got.mask, got.runs
        kept = len(runs)
        if tok.max_length is not None and len(ids) > tok.max_length:
            cut = tok.max_length
            kept = sum(1 for a, n in runs if a + n <= cut)
            if kept < len(runs):  # the sample ends before an image the cut falls in
                cut = min(cut, runs[kept][0])
            ids, mask = ids[:cut], mask[:cut]
        return Encoded(
            input_ids=torch.from_numpy(ids),
            images=tuple(range(kept)),
            placeholders=tuple(runs[:kept]),
            images_dropped=len(runs) - kept,
            length=len(ids),
            loss_mask=torch.from_numpy(mask),
        )

    def tokens_of(self, height: int, width: int) -> int:
        """Placeholder tokens of an image of this output size."""
        if self.image_tokens is not None:
            n = self.image_tokens(height, width)
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigError(
                    f"Interleaved: image_tokens({height}, {width}) returned {n!r}, not an int >= 1"
                )
            return n
        p = self.native.patch if self.native is not None else 14
        return max(1, (height // p) * (width // p))

    def model_inputs(self, batch: dict[str, Any], device: Any = "cpu") -> dict[str, Any]:
        """What the model family's class takes (``model(**inputs)``), on ``device``: the
        pixels normalized there, as its processor normalizes them (``model=`` is needed)."""
        if self.model is None:
            raise ConfigError("Interleaved.model_inputs: give Interleaved(model=...) a family")
        assert self.tokenizer is not None
        return self.model.model_inputs(batch, device, self.tokenizer.image_token_id)  # type: ignore[no-any-return]

    @property
    def pad_id(self) -> Any:
        pad = None if self.tokenizer is None else self.tokenizer.pad_id
        return 0 if pad is None else pad

    def describe(self) -> str:
        how = (
            f"native resolution ({self.native.min_pixels}-{self.native.max_pixels} px, "
            f"sides x{self.native.patch})"
            if self.native is not None
            else "every image through the recipe"
        )
        most = f", at most {self.max_images} images a sample" if self.max_images is not None else ""
        tok = f", tokenized by {self.tokenizer!r}" if self.tokenizer is not None else ""
        chat = f", conversations by the chat template (loss: {self.chat.loss})" if self.chat else ""
        return f"interleaved samples: {how}{most}{tok}{chat}"


__all__ = ["Interleaved", "Packing"]
