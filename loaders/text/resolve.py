"""What ``TextTokenizer(...)`` is given, read once where it is made into what it carries to the
workers: a tokenizers JSON file (its path, read again in each process and checked against the
sha256 taken here), or the tokenizer's JSON itself (a ``tokenizers.Tokenizer``, a transformers
fast tokenizer, or a transformers ``save_pretrained`` folder loaded here with local files only:
a transformers tokenizer is carried as its backend tokenizer's JSON, so the workers need only
``tokenizers``). Every failure is a one-line ``ConfigError`` naming what was given."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from wdstool.base.errors import ConfigError

PIP = "pip install -e '.[text]'"


@dataclass(frozen=True)
class Carried:
    """A tokenizer as the settings carry it (never the tokenizer object)."""

    what: str  # how messages name it: the path, or the kind of object given
    digest: str  # sha256 of the tokenizer's JSON: its fingerprint, the cache's key
    path: str | None = None  # a tokenizers JSON file, read in each process
    json: str | None = None  # else the JSON itself
    pad_id: int | None = None  # the pad token's id, where the tokenizer names one
    # a transformers tokenizer's chat template (its Jinja text; None: it has none) and the
    # special tokens its templates see (bos_token, eos_token, ...: transformers passes its
    # special_tokens_map to every template)
    chat_template: str | None = None
    template_vars: tuple[tuple[str, str], ...] = ()


def tokenizers_module() -> ModuleType:
    try:
        import tokenizers
    except ImportError:
        raise ConfigError(f"TextTokenizer needs the tokenizers package: {PIP}") from None
    return tokenizers


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:200]


def parse(text: str, what: str) -> Any:
    """A ``tokenizers.Tokenizer`` from its JSON; ConfigError naming ``what`` if it is not one."""
    tokenizers = tokenizers_module()
    try:
        json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"TextTokenizer: {what} is not JSON ({_first_line(exc)})") from None
    try:
        return tokenizers.Tokenizer.from_str(text)
    except Exception as exc:
        raise ConfigError(
            f"TextTokenizer: {what} is not a tokenizers JSON file ({_first_line(exc)})"
        ) from None


def read_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"TextTokenizer: no such file {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"TextTokenizer: cannot read {path} ({_first_line(exc)})") from None


def _json_pad_id(text: str) -> int | None:
    padding = json.loads(text).get("padding")
    pad_id = padding.get("pad_id") if isinstance(padding, dict) else None
    return pad_id if isinstance(pad_id, int) else None


def _from_transformers(obj: Any, what: str) -> Carried:
    if not getattr(obj, "is_fast", False) or not hasattr(obj, "backend_tokenizer"):
        raise ConfigError(
            f"TextTokenizer: {what} is a slow (Python) transformers tokenizer; give a fast one "
            "(AutoTokenizer.from_pretrained(..., use_fast=True)) or the folder it was saved to "
            "with save_pretrained"
        )
    text = obj.backend_tokenizer.to_str()
    pad = getattr(obj, "pad_token_id", None)
    template = getattr(obj, "chat_template", None)
    specials = getattr(obj, "special_tokens_map", None) or {}
    return Carried(
        what=what,
        digest=_digest(text),
        json=text,
        pad_id=pad if isinstance(pad, int) else _json_pad_id(text),
        chat_template=template if isinstance(template, str) else None,
        template_vars=tuple(sorted((k, v) for k, v in specials.items() if isinstance(v, str))),
    )


def _from_folder(folder: str) -> Carried:
    try:
        import transformers
    except ImportError:
        raise ConfigError(
            f"TextTokenizer: {folder} is a folder, read as a transformers save_pretrained "
            f"folder, which needs transformers: {PIP}"
        ) from None
    try:
        obj = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as exc:
        raise ConfigError(
            f"TextTokenizer: {folder} is not a transformers tokenizer folder ({_first_line(exc)})"
        ) from None
    return _from_transformers(obj, folder)


def _is_transformers(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "transformers" or any(
        c.__module__.split(".")[0] == "transformers" for c in type(obj).__mro__
    )


def carry(tokenizer: Any) -> Carried:
    """What the settings carry for ``tokenizer`` (a path, a folder or a tokenizer object)."""
    tokenizers = tokenizers_module()
    if isinstance(tokenizer, str | os.PathLike):
        path = os.fspath(tokenizer)
        if os.path.isdir(path):
            return _from_folder(path)
        if not os.path.exists(path):
            raise ConfigError(f"TextTokenizer: no such file or folder {path}")
        text = read_file(path)
        parse(text, path)
        return Carried(what=path, digest=_digest(text), path=path, pad_id=_json_pad_id(text))
    if _is_transformers(tokenizer):
        return _from_transformers(tokenizer, f"a {type(tokenizer).__name__}")
    if isinstance(tokenizer, tokenizers.Tokenizer):
        text = tokenizer.to_str()
        return Carried(
            what="a tokenizers.Tokenizer",
            digest=_digest(text),
            json=text,
            pad_id=_json_pad_id(text),
        )
    raise ConfigError(
        "TextTokenizer takes a tokenizer.json path, a transformers save_pretrained folder, a "
        f"tokenizers.Tokenizer or a transformers fast tokenizer, not {type(tokenizer).__name__}"
    )


def build(carried: Carried) -> Any:
    """The tokenizer itself, in this process: parsed from the carried JSON, or the file read
    again and checked against the digest taken where the settings were made."""
    if carried.json is not None:
        return parse(carried.json, carried.what)
    assert carried.path is not None
    text = read_file(carried.path)
    if _digest(text) != carried.digest:
        raise ConfigError(
            f"TextTokenizer: {carried.path} changed since the TextTokenizer was made (its sha256 "
            "differs); make it again"
        )
    return parse(text, carried.path)
