"""The library's defaults as the options' defaults: one place for every default.

An option made by :func:`library_option` takes its default from the library setting it feeds
(an options dataclass's field, a function's keyword), read when its command runs or shows its
help, so ``wdstool --help`` and the other commands do not load that part of the library.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import click


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
