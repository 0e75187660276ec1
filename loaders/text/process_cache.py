"""The tokenizers this process has built, one per fingerprint (the sha256 of the tokenizer's
JSON): ``TextTokenizer`` settings look theirs up here at each call and build it at the first,
so a process (the training process, each DataLoader worker, decode threads sharing one process)
builds a tokenizer once, never per sample. Forked workers inherit what the parent built;
spawned ones build their own from the pickled settings. ``load_count`` says how many times this
process built one (tests count on it).

Built here too, once: what the tokenizer's post-processor puts around a single sequence
(``prefix``, ``suffix``: its bos/eos, ``[CLS]``/``[SEP]``), learnt by post-processing a probe
sequence and checked on a second one of another length."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from loaders.text.resolve import Carried, build
from wdstool.base.errors import ConfigError


@dataclass(frozen=True)
class Loaded:
    """A built tokenizer (truncation and padding off: the settings do their own) and the ids
    its post-processor adds before and after a single sequence."""

    tokenizer: Any
    prefix: tuple[int, ...]
    suffix: tuple[int, ...]


_LOADED: dict[str, Loaded] = {}
_LOADS: Counter[str] = Counter()
_LOCK = threading.Lock()
PROBES = ("a", "hello world", "0", "The")


def load_count(fingerprint: str) -> int:
    """How many times this process has built the tokenizer of ``fingerprint``."""
    return _LOADS[fingerprint]


def loaded(carried: Carried) -> Loaded:
    """The tokenizer ``carried`` names, built at this process's first call."""
    hit = _LOADED.get(carried.digest)
    if hit is not None:
        return hit
    with _LOCK:
        hit = _LOADED.get(carried.digest)
        if hit is None:
            tokenizer = build(carried)
            tokenizer.no_truncation()
            tokenizer.no_padding()
            hit = Loaded(tokenizer, *_around(tokenizer, carried.what))
            _LOADED[carried.digest] = hit
            _LOADS[carried.digest] += 1
    return hit


def _probe(tokenizer: Any) -> Any:
    """An encoding of at least one token, without special tokens (None: nothing encodes)."""
    for text in PROBES:
        enc = tokenizer.encode(text, add_special_tokens=False)
        if len(enc.ids):
            return enc
    return None


def _around(tokenizer: Any, what: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(prefix, suffix): the ids the post-processor adds around a single sequence."""
    enc = _probe(tokenizer)
    if enc is None:
        empty = tokenizer.post_process(tokenizer.encode("", add_special_tokens=False), None, True)
        if len(empty.ids):
            raise ConfigError(
                f"TextTokenizer: {what} encodes none of {list(PROBES)}, so where its "
                "post-processor puts special tokens cannot be told"
            )
        return (), ()
    done = tokenizer.post_process(enc, None, True)
    ids, seq = list(done.ids), list(done.sequence_ids)
    inside = [i for i, s in enumerate(seq) if s == 0]
    first, last = (inside[0], inside[-1]) if inside else (0, -1)
    content = list(enc.ids)
    if ids[first : last + 1] != content or len(inside) != len(content):
        raise ConfigError(
            f"TextTokenizer: {what}'s post-processor changes the tokens of the text, not only "
            "adds special tokens around it; that is not supported"
        )
    prefix, suffix = tuple(ids[:first]), tuple(ids[last + 1 :])
    twice = type(enc).merge([enc, enc], growing_offsets=True)
    again = tokenizer.post_process(twice, None, True).ids
    if list(again) != [*prefix, *content, *content, *suffix]:
        raise ConfigError(
            f"TextTokenizer: {what}'s post-processor adds special tokens that depend on the text; "
            "that is not supported"
        )
    return prefix, suffix
