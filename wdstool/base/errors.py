"""One error hierarchy for the whole tool.

Every domain error is a :class:`click.ClickException`, so the CLI shows a one-line
``Error: ...`` message and exits non-zero instead of printing a traceback. Library users
catch :class:`WdsToolError` (or a subclass). Messages name the bad value, the file or URL,
and, where there is one, the fix.
"""

from __future__ import annotations

from enum import StrEnum

import click


class OnError(StrEnum):
    """What a bad input does, on both sides (``on_error=`` of pack, reshard, split and
    ``make_loader``). ``raise``: a one-line error naming it (a writer publishes nothing).
    ``skip``: a writer leaves it out and lists it in ``index.json`` (``skipped``); a loader
    replaces the sample, counts it and logs its shard and offset."""

    RAISE = "raise"
    SKIP = "skip"


class WdsToolError(click.ClickException):
    """Base class of every error wdstool raises on purpose."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        message = _unwrap_worker_message(str(message))
        # one line, always: a multi-line message would break "one-line error" promises
        super().__init__(" ".join(message.split()))

    def __reduce__(self):  # picklable across process pools and DataLoader workers
        return (type(self), (self.message,))


def _unwrap_worker_message(message: str) -> str:
    """torch's DataLoader re-raises a worker's exception as ``type("Caught X in DataLoader
    worker process N.\nOriginal Traceback ...\nmodule.X: <message>")``; keep the message."""
    if not message.startswith("Caught ") or "Original Traceback" not in message:
        return message
    head = message.split("\n", 1)[0]
    last = [line for line in message.splitlines() if line.strip()][-1]
    original = last.split(": ", 1)[1] if ": " in last else last
    where = head[len("Caught ") :].split(" ", 1)[-1].rstrip(".")  # "in DataLoader worker process 0"
    return f"{original} ({where})"


class ConfigError(WdsToolError):
    """A bad option or argument (rejected before any work starts)."""

    exit_code = 2


class InputError(WdsToolError):
    """Bad source data: a missing or malformed ImageFolder tree, an unreadable image."""


class DestinationError(WdsToolError):
    """The destination cannot be used: it holds another dataset, is not writable, ..."""


class ShardError(WdsToolError):
    """A shard or manifest is missing, corrupt, or disagrees with the other."""


class UnsafeMembersError(ShardError):
    """Shards hold members unsafe to extract with ``tar -x`` (absolute or ``..`` names, links,
    devices, FIFOs, non-UTF-8 names). ``report`` carries the whole verify report, problems
    included, for ``--json``."""

    def __init__(self, message: str, report: dict | None = None) -> None:
        super().__init__(message)
        self.report = report if report is not None else {}


class StorageError(WdsToolError):
    """Reading or writing storage failed (after retries, where retries apply)."""


class SampleError(ShardError):
    """One sample inside a shard cannot be decoded."""
