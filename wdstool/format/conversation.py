"""Conversations as samples: roles, turns and where each image goes, kept as published.

Fine-tuning sets are conversations in one of two forms:

- ShareGPT / LLaVA (``"conversations": [{"from": "human", "value": "<image>\\nWhat is it?"},
  {"from": "gpt", "value": "A cat."}]``): a role in ``from`` (``human``, ``gpt``, ``system``,
  ...), the text in ``value``, each image an ``<image>`` marker where it stands;
- the OpenAI / Hugging Face messages form (``"messages": [{"role": "user", "content": [{"type":
  "image"}, {"type": "text", "text": "What is it?"}]}, {"role": "assistant", "content": "A
  cat."}]``): ``content`` a string, or a list of parts, an image part where the image stands.

A sample keeps its conversation in ``KEY.json`` in the second form, with every content a list
of parts and each image part naming its member (``{"type": "image", "image": "0.jpg"}``: the
sample's ``KEY.0.jpg``; images numbered in reading order)::

    {"messages": [{"role": "user", "content": [{"type": "image", "image": "0.jpg"},
                                               {"type": "text", "text": "What is it?"}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}]}

Roles are normalised to ``system``, ``user``, ``assistant`` (ShareGPT's ``human``/``gpt``,
``bot``, ``model``); other roles (``tool``, ...) are kept as written. A conversation's text and
images in reading order are :func:`lists_of` it: the ``texts``/``images`` lists every other
sample of several images has (:mod:`wdstool.format.interleaved`), so the manifest's facts,
``verify`` and ``show`` read both alike. A conversation may have no image.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

MARKER = "<image>"
ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "bot": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "system": "system",
}
_ROLE = re.compile(r"[a-z_][a-z0-9_-]*")
IMAGE_REFS = (
    "image",
    "url",
    "path",
    "image_url",
)  # where a messages-form image part names its file

Message = dict[str, Any]


class ConversationError(ValueError):
    """A conversation that cannot be read: one line saying where and what (the caller names
    the file and row)."""


def role_of(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ConversationError(f"{where}: a role must be a non-empty string, got {raw!r}")
    role = raw.strip().lower()
    role = ROLES.get(role, role)
    if not _ROLE.fullmatch(role):
        raise ConversationError(f"{where}: role {raw!r} is not a name")
    return role


def _text_parts(text: str, where: str) -> list[dict[str, Any]]:
    """``text`` split at its ``<image>`` markers: text parts and image parts (unnamed yet)."""
    if not isinstance(text, str):
        raise ConversationError(
            f"{where}: a turn's text must be a string, got {type(text).__name__}"
        )
    parts: list[dict[str, Any]] = []
    for n, piece in enumerate(text.split(MARKER)):
        if n:
            parts.append({"type": "image"})
        if piece:
            parts.append({"type": "text", "text": piece})
    return parts


def from_sharegpt(turns: Any, where: str) -> list[Message]:
    """ShareGPT/LLaVA ``conversations`` as messages (image parts unnamed, in order)."""
    if not isinstance(turns, list) or not turns:
        raise ConversationError(f"{where}: 'conversations' must be a non-empty list of turns")
    out = []
    for n, turn in enumerate(turns):
        at = f"{where}: conversations[{n}]"
        if not isinstance(turn, dict) or "from" not in turn or "value" not in turn:
            raise ConversationError(f'{at}: a turn is {{"from": ROLE, "value": TEXT}}')
        out.append({"role": role_of(turn["from"], at), "content": _text_parts(turn["value"], at)})
    return out


def from_messages(messages: Any, where: str) -> tuple[list[Message], list[str | None]]:
    """The messages form as stored messages (image parts unnamed, in order), and the file each
    image part names itself (its ``image``/``url``/``path``; None where it names none, or for
    an ``<image>`` marker in a text: the row's image list gives it)."""
    if not isinstance(messages, list) or not messages:
        raise ConversationError(f"{where}: 'messages' must be a non-empty list of messages")
    out: list[Message] = []
    refs: list[str | None] = []
    for n, msg in enumerate(messages):
        at = f"{where}: messages[{n}]"
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise ConversationError(f'{at}: a message is {{"role": ROLE, "content": ...}}')
        content = msg["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise ConversationError(f"{at}: content must be a string or a list of parts")
        parts: list[dict[str, Any]] = []
        for k, part in enumerate(content):
            pat = f"{at}.content[{k}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                got = _text_parts(part.get("text"), pat)
                refs.extend(None for p in got if p["type"] == "image")
                parts.extend(got)
            elif kind in ("image", "image_url"):
                ref = next((part[r] for r in IMAGE_REFS if part.get(r) is not None), None)
                if isinstance(ref, dict):  # OpenAI's {"image_url": {"url": ...}}
                    ref = ref.get("url")
                if ref is not None and not isinstance(ref, str):
                    raise ConversationError(f"{pat}: an image part names {ref!r}, not a path")
                parts.append({"type": "image"})
                refs.append(ref)
            else:
                raise ConversationError(
                    f"{pat}: a part is {{'type': 'text', 'text': ...}} or {{'type': 'image'}}, "
                    f"got {part!r:.80}"
                )
        out.append({"role": role_of(msg["role"], at), "content": parts})
    return out, refs


def image_parts(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The image parts of ``messages``, in reading order."""
    return [p for m in messages for p in m["content"] if p["type"] == "image"]


def named(messages: Sequence[Message], members: Sequence[str]) -> list[Message]:
    """``messages`` with image part ``i`` naming member ``members[i]`` (``"0.jpg"``)."""
    it = iter(members)
    return [
        {
            "role": m["role"],
            "content": [
                {"type": "image", "image": next(it)} if p["type"] == "image" else dict(p)
                for p in m["content"]
            ],
        }
        for m in messages
    ]


def lists_of(messages: Sequence[Message]) -> tuple[list[str | None], list[str | None]]:
    """(texts, images): the conversation's content in reading order as two parallel lists (a
    text, or an image's member, at each position), the layout of every sample of several
    images. Roles are not in it: :func:`turns` has them."""
    texts: list[str | None] = []
    images: list[str | None] = []
    for m in messages:
        for p in m["content"]:
            texts.append(p["text"] if p["type"] == "text" else None)
            images.append(p.get("image") if p["type"] == "image" else None)
    return texts, images


def check_stored(messages: Any, where: str) -> list[Message]:
    """``KEY.json``'s ``messages`` as stored (roles, lists of text and named image parts);
    ConversationError with the reason otherwise."""
    if not isinstance(messages, list) or not messages:
        raise ConversationError(f"{where}: 'messages' must be a non-empty list")
    for n, m in enumerate(messages):
        at = f"{where}: messages[{n}]"
        if not isinstance(m, dict) or not isinstance(m.get("content"), list):
            raise ConversationError(f"{at}: not a message with a list of parts")
        role_of(m.get("role"), at)
        for k, p in enumerate(m["content"]):
            ok = isinstance(p, dict) and (
                (p.get("type") == "text" and isinstance(p.get("text"), str))
                or (p.get("type") == "image" and isinstance(p.get("image"), str))
            )
            if not ok:
                raise ConversationError(f"{at}.content[{k}]: not a text part or a named image")
    return messages


def for_template(messages: Sequence[Message]) -> list[Message]:
    """``messages`` as chat templates take them: image parts as ``{"type": "image"}``."""
    return [
        {
            "role": m["role"],
            "content": [
                {"type": "image"} if p["type"] == "image" else dict(p) for p in m["content"]
            ],
        }
        for m in messages
    ]


__all__ = [
    "MARKER",
    "ConversationError",
    "check_stored",
    "for_template",
    "from_messages",
    "from_sharegpt",
    "image_parts",
    "lists_of",
    "named",
    "role_of",
]
