"""click parameter types: sizes and the like are parsed here, once."""

from __future__ import annotations

import re

import click

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | float) -> int:
    """'256MB' -> 256_000_000, '1.5GiB' -> 1610612736, '4096' -> 4096. Raises ValueError."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a size")
    if isinstance(text, int | float):
        return int(text)
    m = _SIZE_RE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size (examples: 256MB, 1.5GiB, 1000000)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


class ByteSize(click.ParamType):
    """A byte count with an optional unit: 256MB, 1.5GiB, 1000000."""

    name = "size"

    def convert(self, value, param, ctx):  # type: ignore[override]
        if isinstance(value, int):
            return value
        try:
            size = parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if size <= 0:
            self.fail(f"{value!r} must be positive", param, ctx)
        return size


BYTE_SIZE = ByteSize()


class WorkerList(click.ParamType):
    """'2' or '0,1,2,4': the worker counts to sweep."""

    name = "list"

    def convert(self, value, param, ctx):  # type: ignore[override]
        if isinstance(value, tuple):
            return value
        try:
            counts = tuple(int(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of integers", param, ctx)
        if not counts or min(counts) < 0:
            self.fail(f"{value!r}: worker counts must be >= 0", param, ctx)
        return counts


WORKER_LIST = WorkerList()


class Dimensions(click.ParamType):
    """'1600x1200': an image's width and height in pixels."""

    name = "WxH"

    def convert(self, value, param, ctx):  # type: ignore[override]
        if isinstance(value, tuple):
            return value
        m = re.fullmatch(r"\s*([0-9]+)\s*[xX]\s*([0-9]+)\s*", str(value))
        if not m or min(int(m.group(1)), int(m.group(2))) < 16:
            self.fail(f"{value!r} is not WIDTHxHEIGHT with both >= 16 (e.g. 1600x1200)", param, ctx)
        return int(m.group(1)), int(m.group(2))


DIMENSIONS = Dimensions()


class SecondsRange(click.ParamType):
    """'2-6' (or '1.5'): a range of video lengths in seconds, 0 < MIN <= MAX."""

    name = "MIN-MAX"

    def convert(self, value, param, ctx):  # type: ignore[override]
        if isinstance(value, tuple):
            return value
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(?:-\s*([0-9]*\.?[0-9]+)\s*)?", str(value))
        lo = float(m.group(1)) if m else 0.0
        hi = float(m.group(2) or m.group(1)) if m else 0.0
        if not 0 < lo <= hi:
            self.fail(
                f"{value!r} is not MIN-MAX seconds with 0 < MIN <= MAX (e.g. 2-6)", param, ctx
            )
        return lo, hi


SECONDS_RANGE = SecondsRange()
