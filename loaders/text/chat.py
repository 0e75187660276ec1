"""Conversations rendered by the model's own chat template, and the loss where the model learns.

    Interleaved(tokenizer=TextTokenizer("my-model/", image_token="<image>"), chat=Chat())

A conversation (``KEY.json``'s ``messages``: :mod:`wdstool.format.conversation`) is rendered in
the workers with the tokenizer's chat template (the Jinja text saved with it, or
``Chat(template=...)``), by transformers' own renderer (``render_jinja_template``, what
``apply_chat_template`` runs), and the text tokenized without special tokens, as
``apply_chat_template(messages, tokenize=True)`` does: the ids are its ids. Each image part is
rendered where the template writes it (``<image>``, or Qwen2-VL's ``<|vision_start|><|image_pad|>
<|vision_end|>``: the model's vision start/end tokens stay), and its placeholder, the
tokenizer's ``image_token``, is expanded to the image's run of tokens.

The loss mask (``Chat.loss``):

- ``"assistant"`` (the default): True exactly on the assistant's replies and the token that
  closes each (``<|im_end|>``, ``<|eot_id|>``), as TRL's ``assistant_only_loss``. Where the
  template marks the replies with ``{% generation %}`` the mask is transformers'
  ``return_assistant_tokens_mask``; elsewhere each reply's characters are found by rendering the
  conversation up to it (with the generation prompt) and up to its end, each a prefix of the
  whole: the reply is what its turn adds, less the whitespace after its end token. A template
  that does not render its turns as prefixes (one that rewrites earlier turns) is a one-line
  error at ``make_loader``, naming the role;
- ``"last"``: the last assistant reply only;
- ``"all"``: every token but the images' placeholders.

A token is in the loss where its characters overlap a reply's (transformers' rule).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wdstool.base.errors import ConfigError, SampleError
from wdstool.format.conversation import for_template

LOSSES = ("assistant", "last", "all")
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")
PROBE = [  # a conversation of every role and two replies: what make_loader renders first
    {"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]},
    {"role": "user", "content": [{"type": "text", "text": "What is on the table?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A cup of tea."}]},
    {"role": "user", "content": [{"type": "text", "text": "And under it?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A saucer."}]},
]


@dataclass(frozen=True, kw_only=True)
class Chat:
    """Render conversations with a chat template (see the module). ``template``: the Jinja
    text; None: the tokenizer's own (a transformers tokenizer, or its ``save_pretrained``
    folder, carries it). ``loss``: ``"assistant"``, ``"last"`` or ``"all"``."""

    loss: str = "assistant"
    template: str | None = None

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ConfigError(f"Chat: loss is one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.template is not None and (not isinstance(self.template, str) or not self.template):
            raise ConfigError("Chat: template must be a Jinja chat template (a str)")


@dataclass(frozen=True)
class Rendered:
    """One conversation: its ids (int64, image placeholders expanded), the loss mask (bool),
    each image's run as (start, length), in order."""

    ids: np.ndarray
    mask: np.ndarray
    runs: list[tuple[int, int]]


def _renderer() -> Callable[..., tuple[list[str], list[list[tuple[int, int]]]]]:
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:  # pragma: no cover - the text extra brings it
        raise ConfigError("Chat needs transformers (its chat template renderer)") from None
    return render_jinja_template  # type: ignore[no-any-return]


class ChatRenderer:
    """Renders conversations for one tokenizer and :class:`Chat` (built once per process)."""

    def __init__(self, tokenizer: Any, chat: Chat) -> None:
        template = chat.template or tokenizer.chat_template
        if template is None:
            raise ConfigError(
                f"Chat: {tokenizer.source} has no chat template; give one as "
                "Chat(template=...), or a transformers tokenizer saved with its template"
            )
        self.tok, self.chat, self.template = tokenizer, chat, template
        self.tagged = bool(_GENERATION.search(template))
        self.vars = tokenizer.template_vars
        self._render = _renderer()

    def render(
        self, messages: Sequence[dict[str, Any]], *, prompt: bool = False, spans: bool = False
    ) -> tuple[str, list[tuple[int, int]]]:
        """The conversation's text (``prompt``: with the generation prompt after it) and, with
        ``spans``, the ``{% generation %}`` spans."""
        texts, indices = self._render(
            conversations=[for_template(messages)],
            chat_template=self.template,
            return_assistant_tokens_mask=spans,
            add_generation_prompt=prompt,
            **self.vars,
        )
        return texts[0], (indices[0] if spans else [])

    def reply_spans(
        self, messages: Sequence[dict[str, Any]], text: str, where: str
    ) -> list[tuple[int, int]]:
        """The characters of each assistant reply in ``text`` (the whole rendered): by the
        template's ``{% generation %}`` marks, else turn by turn (see the module)."""
        if self.tagged:
            return list(self.render(messages, spans=True)[1])
        out = []
        for k, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before = self.render(messages[:k], prompt=True)[0] if k else ""
            upto = self.render(messages[: k + 1])[0]
            if not text.startswith(before) or not text.startswith(upto):
                raise ConfigError(
                    f"Chat: {where}: the template does not render the conversation up to the "
                    f"assistant's turn {k} as a prefix of the whole (it rewrites earlier turns): "
                    "mark the replies with {% generation %} in the template, or set "
                    "Chat(loss='all')"
                )
            end = len(upto.rstrip())
            out.append((len(before), max(end, len(before))))
        return out

    def encode(
        self, messages: Sequence[dict[str, Any]], image_tokens: Sequence[int], where: str
    ) -> Rendered:
        """One conversation as ids, loss mask and image runs (``image_tokens[i]``: image i's).
        A template with ``{% generation %}`` is rendered once, for its text and its spans."""
        loss = self.chat.loss
        if loss != "all" and self.tagged:
            text, spans = self.render(messages, spans=True)
        else:
            text, _ = self.render(messages)
            spans = self.reply_spans(messages, text, where) if loss != "all" else []
        got, offsets = self.tok.encode_plain(text)
        ids = np.asarray(got, dtype=np.int64)
        if loss == "all":
            mask = np.ones(len(ids), dtype=bool)
        else:
            if loss == "last":
                spans = spans[-1:]
            mask = _overlapping(np.asarray(offsets, dtype=np.int64).reshape(-1, 2), spans)
        return _expand(ids, mask, self.tok.image_token_id, image_tokens, where)

    def check(self) -> None:
        """Render :data:`PROBE` (without its system message where the template refuses one)
        and find its replies: a template that cannot is a one-line ConfigError now, not at the
        first batch."""
        probe = PROBE
        try:
            text, _ = self.render(probe)
        except Exception:
            probe = PROBE[1:]
            try:
                text, _ = self.render(probe)
            except Exception as exc:
                raise ConfigError(
                    f"Chat: the template does not render a conversation: {exc}"
                ) from None
        if self.chat.loss != "all":
            spans = self.reply_spans(probe, text, "a probe conversation")
            if len(spans) != 2 or any(a >= b for a, b in spans):
                raise ConfigError(
                    f"Chat: the template marks {len(spans)} replies of a conversation of two "
                    "assistant turns"
                )


@functools.lru_cache(maxsize=8)
def renderer_for(tokenizer: Any, chat: Chat) -> ChatRenderer:
    """The renderer of ``tokenizer`` and ``chat`` in this process (built once: the template
    compiled once per process, as transformers caches it)."""
    return ChatRenderer(tokenizer, chat)


def _overlapping(offsets: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """True for each token (``offsets``: its [start, end) characters, one row a token) whose
    characters overlap a span: transformers' ``return_assistant_tokens_mask``."""
    mask = np.zeros(len(offsets), dtype=bool)
    for start, end in spans:
        mask |= (offsets[:, 0] < end) & (offsets[:, 1] > start)
    return mask


def _expand(
    ids: np.ndarray, mask: np.ndarray, image_id: int | None, counts: Sequence[int], where: str
) -> Rendered:
    """Each image placeholder expanded to its run of ``counts[i]`` (never in the loss)."""
    at = np.flatnonzero(ids == image_id) if image_id is not None else np.zeros(0, np.int64)
    if len(at) != len(counts):
        raise SampleError(
            f"{where}: the chat template wrote {len(at)} image placeholder(s) for "
            f"{len(counts)} image(s) (is the tokenizer's image_token the one the template "
            "writes for an image part?)"
        )
    if not len(at):
        return Rendered(ids, mask, [])
    repeats = np.ones(len(ids), dtype=np.int64)
    repeats[at] = counts
    mask[at] = False
    starts = np.cumsum(repeats) - repeats
    runs = [(int(starts[t]), int(n)) for t, n in zip(at, counts, strict=True)]
    return Rendered(np.repeat(ids, repeats), np.repeat(mask, repeats), runs)


__all__ = ["LOSSES", "Chat", "ChatRenderer", "Rendered", "renderer_for"]
