"""What every command shares: S3 options, progress bars, ``--field`` specs, JSON output."""

from __future__ import annotations

import functools
import json
import sys
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
