"""Sample fields: which member a field comes from, and how its bytes become a value.

A field spec is a short string:

- ``"txt"`` -> ``str`` (the member decoded as UTF-8)
- ``"json"`` -> the parsed object; ``"json:a.b"`` -> the value at that key path inside it (list
  positions are numbers: ``"json:boxes.0"``); ``None`` where a key is missing
- any other extension (``"cls"``, ``"seg.png"``, ``"npy"``) -> the member's ``bytes``, untouched;
  nothing is ever unpickled (``.pyd``/``.pth``/``.pkl``/``.pickle`` too are only bytes)

A *label* spec is ``"cls"`` (or any extension whose member holds a decimal integer) or
``"json:PATH"`` (an integer at that path). A field whose member is missing from a sample is
``None``; a label whose member is missing, a ``.json`` that does not parse, text that is not
UTF-8 or a label that is not an integer raise :class:`FieldError` with the reason (the loader
turns it into a bad-sample error naming the shard and key).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

_EXT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class FieldError(ValueError):
    """One sample's field cannot be read; the message says why (no shard or key in it)."""


class Kind(StrEnum):
    TEXT = "text"
    JSON = "json"
    BYTES = "bytes"


@dataclass(frozen=True)
class FieldSpec:
    """Member extension ``ext``, read as ``kind``; ``path`` into a JSON value."""

    ext: str
    kind: Kind
    path: tuple[str, ...] = ()
    text: str = ""  # the spec as written, for messages

    @classmethod
    def parse(cls, spec: str) -> FieldSpec:
        """Parse a field spec; ValueError with the reason for a malformed one."""
        if not isinstance(spec, str) or not spec:
            raise ValueError(f"{spec!r} is not a field spec (examples: 'txt', 'json:a.b', 'npy')")
        ext, sep, rest = spec.partition(":")
        ext = ext.lower()
        if sep and ext != "json":
            raise ValueError(f"{spec!r}: only json members take a key path ('json:a.b')")
        if not _EXT.match(ext):
            raise ValueError(f"{spec!r}: {ext!r} is not a member extension")
        if sep:
            path = tuple(rest.split("."))
            if not rest or any(not p for p in path):
                raise ValueError(f"{spec!r}: empty key in the path (write 'json:a.b')")
            return cls(ext, Kind.JSON, path, spec)
        kind = Kind.TEXT if ext == "txt" else Kind.JSON if ext == "json" else Kind.BYTES
        return cls(ext, kind, (), spec)

    def read(self, parts: Mapping[str, bytes], cache: dict[str, Any] | None = None) -> Any:
        """This field's value in a sample's members (``None`` when the member is missing).
        ``cache`` shares one parse of the ``.json`` member between the fields that need it."""
        raw = parts.get(self.ext)
        if raw is None:
            return None
        if self.kind is Kind.BYTES:
            return raw
        if self.kind is Kind.TEXT:
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FieldError(f".{self.ext} is not UTF-8 text ({exc.reason})") from None
        value = _parsed(self.ext, raw, cache)
        return _at(value, self.path)


def _parsed(ext: str, raw: bytes, cache: dict[str, Any] | None) -> Any:
    if cache is not None and ext in cache:
        return cache[ext]
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FieldError(f".{ext} is not valid JSON ({exc})") from None
    if cache is not None:
        cache[ext] = value
    return value


def _at(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and key.isascii() and key.isdigit():  # not "²": a digit to
            i = int(key)  # str.isdigit, not to int()
            value = value[i] if i < len(value) else None
        else:
            return None
        if value is None:
            return None
    return value


@dataclass(frozen=True)
class LabelSpec:
    """Where a sample's integer label is: a member holding a decimal integer, or a JSON path."""

    field: FieldSpec

    @classmethod
    def parse(cls, spec: str) -> LabelSpec:
        field = FieldSpec.parse(spec)
        if field.kind is Kind.TEXT or (field.kind is Kind.JSON and not field.path):
            raise ValueError(
                f"{spec!r} is not a label spec: use 'cls' (a member holding an integer) or "
                "'json:PATH' (an integer inside the .json member)"
            )
        return cls(field)

    @property
    def ext(self) -> str:
        return self.field.ext

    def read(self, parts: Mapping[str, bytes], cache: dict[str, Any] | None = None) -> int:
        value = self.field.read(parts, cache)
        if value is None:
            hint = f"label={self.field.text!r}; label=None reads data without labels"
            if self.ext not in parts:
                raise FieldError(f"no .{self.ext} member ({hint})")
            raise FieldError(f"no label at '{'.'.join(self.field.path)}' in .{self.ext} ({hint})")
        if self.field.kind is Kind.BYTES:
            try:
                return int(value.strip())
            except ValueError:
                raise FieldError(f"bad label {value[:20]!r} in .{self.ext}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise FieldError(
                f"label {json.dumps(value)[:40]} at '{'.'.join(self.field.path)}' is not an integer"
            )
        return value
