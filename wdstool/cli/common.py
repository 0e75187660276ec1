"""What every command shares: S3 options, progress bars, JSON output, the library's defaults
as the options' defaults, and the library's words for its settings in the command's flags."""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import inspect
import json
import logging
import re
import sys
from collections.abc import Callable
from typing import Any

import click

from wdstool.base.errors import ConfigError


def progress_enabled(quiet: bool) -> bool:
    """Progress bars go to stderr, and only to a terminal."""
    return not quiet and sys.stderr.isatty()


def storage_options_from_cli(f):
    """``--endpoint-url`` and ``--anon``, passed to the command as ``storage_options``."""

    @click.option(
        "--endpoint-url",
        default=None,
        metavar="URL",
        help="S3-compatible endpoint for s3:// URLs (default: AWS_ENDPOINT_URL_S3 / "
        "AWS_ENDPOINT_URL, else AWS). Credentials come from the usual AWS variables or profile.",
    )
    @click.option("--anon", is_flag=True, help="Unsigned S3 requests (public buckets).")
    @functools.wraps(f)
    def wrapper(*args, endpoint_url: str | None, anon: bool, **kwargs):
        options: dict[str, Any] = {}
        if endpoint_url:
            options["endpoint_url"] = endpoint_url
        if anon:
            options["anon"] = True
        return f(*args, storage_options=options or None, **kwargs)

    return wrapper


def library_default(owner: str, name: str) -> Any:
    """The library's default for setting ``name`` of ``owner`` (``"module:Class"``, a dataclass,
    or ``"module:function"``, a keyword); an enum as its value, as the CLI spells it."""
    module, _, attr = owner.partition(":")
    obj = getattr(importlib.import_module(module), attr)
    if dataclasses.is_dataclass(obj):
        f = {f.name: f for f in dataclasses.fields(obj)}[name]
        value = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
    else:
        value = inspect.signature(obj).parameters[name].default
    if value in (dataclasses.MISSING, inspect.Parameter.empty):
        raise TypeError(f"{owner}: {name} has no default")
    return value.value if isinstance(value, enum.Enum) else value


class LibraryDefault(click.Option):
    """An option whose default is the library's: setting ``setting`` (default: the option's
    parameter name) of ``library`` (see :func:`library_default`), so every default has one
    place. It is read when the command runs or shows its help, so the library loads only for
    the command that uses it; ``shown`` renders it for the help (``256.0 MB`` for a size)."""

    def __init__(
        self,
        *args: Any,
        library: str,
        setting: str | None = None,
        shown: Callable[[Any], str] | None = None,
        **kwargs: Any,
    ) -> None:
        if "default" in kwargs:  # a second place for the default is what this class removes
            raise TypeError(f"{args[0]}: the default is {library}'s; do not give another")
        kwargs.setdefault("show_default", True)
        super().__init__(*args, **kwargs)
        self.library = library
        self.setting = setting or self.name or ""
        self._shown = shown

    def get_default(self, ctx: click.Context, call: bool = True) -> Any:
        value = library_default(self.library, self.setting)
        if not call and self._shown is not None and value is not None:
            return self._shown(value)  # for the help only (call=False): parsing gets the value
        return value


def library_option(library: str, *decls: str, **kwargs: Any) -> Callable[[Any], Any]:
    """``click.option(*decls, **kwargs)`` whose default is ``library``'s (:class:`LibraryDefault`)."""
    return click.option(*decls, cls=LibraryDefault, library=library, **kwargs)


def field_specs(items: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``--field NAME=SPEC`` options (repeatable) as (name, spec) pairs."""
    pairs = []
    for item in items:
        name, sep, spec = item.partition("=")
        if not sep or not name or not spec:
            raise ConfigError(f"--field {item!r}: write NAME=SPEC, e.g. caption=txt")
        pairs.append((name, spec))
    return tuple(pairs)


def emit_json(obj: Any) -> None:
    """Machine-readable output: one JSON document on stdout."""
    click.echo(json.dumps(obj, indent=2, sort_keys=True))


# Library words a command's flags do not spell by name (the library's setting, as its errors
# write it -> the command's flag). Every other ``name=`` of a command's option maps to its flag.
_WORDS: dict[str, dict[str, str]] = {
    "stream-bench": {
        "train=False": "--eval",
        "scaled_decode=False": "--exact-decode",
        "exact=True": "--compare exact",
        "webdataset=True": "--compare webdataset",
        "webdataset_fast=True": "--compare webdataset-fast",
    },
}
_VALUE_ENDS = re.compile(r"[\s,;)]|$")


def flag_words(command: click.Command) -> Callable[[str], str]:
    """Turn the library's words for settings in a message into ``command``'s flags.

    The library names a setting as its keyword: ``prefix='a/b': use letters, ...``, ``use
    overwrite=True to replace it``, ``choose another prefix=``. For each option of the command
    (by its parameter name and by its flag's own name), ``name=True`` becomes the flag,
    ``name=False`` its ``--no-`` form, ``name=VALUE`` becomes ``--flag VALUE`` and a bare
    ``name=`` the flag alone, so the CLI says ``--prefix 'a/b': ...``. Only whole words are
    replaced (not inside paths or URLs: ``/seed=3/``, ``?prefix=x``)."""
    words = dict(_WORDS.get(command.name or "", {}))
    for param in command.params:
        longs = [o for o in param.opts if o.startswith("--")]
        if not isinstance(param, click.Option) or not longs:
            continue
        flag = longs[0]
        for name in {param.name, flag[2:].replace("-", "_")} - {None}:
            if param.is_bool_flag:
                words.setdefault(f"{name}=True", flag)
                negs = [o for o in param.secondary_opts if o.startswith("--")]
                if negs:
                    words.setdefault(f"{name}=False", negs[0])
            else:
                words.setdefault(f"{name}=", flag)
    if not words:
        return lambda text: text
    pattern = re.compile(
        r"(?<![\w.\-/?&'\"])("
        + "|".join(map(re.escape, sorted(words, key=len, reverse=True)))
        + ")"
    )

    def replace(m: re.Match[str]) -> str:
        flag = words[m.group(1)]
        if not m.group(1).endswith("="):
            return flag
        return flag if _VALUE_ENDS.match(m.string, m.end()) else flag + " "

    return lambda text: pattern.sub(replace, text)


class FlagWordsFilter(logging.Filter):
    """A handler filter: the library's log lines in the running command's flags (see
    :func:`flag_words`)."""

    def __init__(self, words: Callable[[str], str]) -> None:
        super().__init__()
        self._words = words

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: let logging report it as usual
            return True
        said = self._words(message)
        if said != message:
            record.msg, record.args = said, None
        return True
