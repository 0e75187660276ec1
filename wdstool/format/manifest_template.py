"""What the first entry of a manifest's shard list says of every other: its template.

:mod:`wdstool.format.manifest_stream` reads a large manifest a piece at a time without an
object per shard. Here, once per manifest and with ``json``'s own decoder: where the top-level
``"shardlist": [`` opens (:func:`shardlist_at`, the values before it decoded), and the first
entry turned into a :class:`Template`: the exact bytes of its keys and of everything between
its values (runs), and which value each gap holds (a string's characters or a number's digits).
Every other entry must be those runs with other values between them; anything else is
:class:`NotTemplate` (the manifest is then parsed the ordinary way).
"""

from __future__ import annotations

import json
import re
from typing import Any

NUMBER_GAP = re.compile(rb"([ \t\n\r]*:[ \t\n\r]*)(-?[0-9]+)([\s\S]*)")
KEY_GAP = re.compile(rb"[ \t\n\r]*:[ \t\n\r]*")
LIST_END = re.compile(rb"[ \t\n\r]*\}[ \t\n\r]*\]")
NUMBER_END = re.compile(rb"-?[0-9]+(?=[ \t\n\r]*\}[ \t\n\r]*\])")
FIELDS = {"url": str, "nsamples": int, "filesize": int, "sha256": str}


class NotTemplate(Exception):
    """The manifest is not one read a piece at a time: parse it the ordinary way."""


def skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n\r":
        i += 1
    return i


def shardlist_at(data: bytes) -> tuple[int, dict[str, Any]] | None:
    """Where ``data``'s top-level ``"shardlist": [`` opens (the offset past ``[``) and the
    values before it; None where ``data`` ends first. NotTemplate where there is none."""
    text = data.decode("latin-1")  # one char a byte: offsets are byte offsets
    dec = json.JSONDecoder()
    seen: dict[str, Any] = {}
    try:  # text[i] past the end (IndexError) or a value cut short (ValueError): read more
        i = skip_ws(text, 0)
        if text[i] != "{":
            raise NotTemplate
        i += 1
        while True:
            i = skip_ws(text, i)
            key, i = dec.raw_decode(text, i)
            i = skip_ws(text, i)
            if not isinstance(key, str) or text[i] != ":":
                raise NotTemplate
            i = skip_ws(text, i + 1)
            if key == "shardlist":
                if text[i] != "[":
                    raise NotTemplate
                return i + 1, seen
            seen[key], i = dec.raw_decode(text, i)
            i = skip_ws(text, i)
            if text[i] != ",":
                raise NotTemplate  # the object ends without a shard list
            i += 1
    except (ValueError, IndexError):
        return None  # cut short: the caller reads more, or gives up at its end


class Template:
    """The first entry's bytes as fixed runs (keys, quotes, separators) between variables (a
    string value's characters, a number's digits). Run ``r`` is found in every entry by its
    first quote: quote ``anchors[r][0]`` of the entry, ``anchors[r][1]`` bytes into the run."""

    def __init__(self, entry: bytes, obj: Any) -> None:
        if (
            not isinstance(obj, dict)
            or set(obj) - set(FIELDS)
            or not {"url", "nsamples"} <= set(obj)
        ):
            raise NotTemplate
        if any(type(v) is not FIELDS[k] for k, v in obj.items()):
            raise NotTemplate
        quotes = [i for i, c in enumerate(entry) if c == 34]
        self.quotes = len(quotes)
        self.runs: list[bytes] = []
        self.fields: list[str] = []  # the variable after each run but the last
        cut = qi = 0
        while qi + 1 < len(quotes):
            key = entry[quotes[qi] + 1 : quotes[qi + 1]].decode("latin-1")
            if key not in obj or key in self.fields:
                raise NotTemplate
            after = quotes[qi + 1] + 1
            if type(obj[key]) is str and qi + 3 < len(quotes):
                if not KEY_GAP.fullmatch(entry[after : quotes[qi + 2]]):
                    raise NotTemplate
                self.runs.append(entry[cut : quotes[qi + 2] + 1])
                cut, qi = quotes[qi + 3], qi + 4
            else:
                number = NUMBER_GAP.fullmatch(
                    entry[after : quotes[qi + 2] if qi + 2 < len(quotes) else len(entry)]
                )
                if number is None:
                    raise NotTemplate
                start = after + len(number.group(1))
                self.runs.append(entry[cut:start])
                cut, qi = start + len(number.group(2)), qi + 2
            self.fields.append(key)
        self.runs.append(entry[cut:])
        if qi != len(quotes) or len(self.fields) != len(obj):
            raise NotTemplate
        # the last run has a quote where the entry ends in a string (its closing quote), none
        # where it ends in a number: then it is found by its end, the next entry's first quote
        self.anchors: list[tuple[int, int] | None] = []
        seen = 0
        for r, run in enumerate(self.runs):
            if b'"' not in run and r + 1 < len(self.runs):
                raise NotTemplate
            self.anchors.append((seen, run.index(b'"')) if b'"' in run else None)
            seen += run.count(b'"')


__all__ = [
    "FIELDS",
    "KEY_GAP",
    "LIST_END",
    "NUMBER_END",
    "NUMBER_GAP",
    "NotTemplate",
    "Template",
    "shardlist_at",
    "skip_ws",
]
