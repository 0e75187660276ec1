"""The library's words for its settings, in the running command's flags.

Library errors and log lines name a setting as the library takes it (``prefix='a/b': ...``,
``use overwrite=True``); a user of the CLI reads ``--prefix 'a/b': ...``, ``use --overwrite``.
The group applies :func:`flag_words` to every :class:`~wdstool.base.errors.WdsToolError`
that reaches it, and :class:`FlagWordsFilter` to every log line on stderr.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import click

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
