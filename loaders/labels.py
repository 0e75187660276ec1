"""``make_loader``'s ``label=`` checked against a source when it is called, before any worker.

Without the check, caption-only shards read with the default ``label="cls"`` fail at the first
batch, inside a worker's traceback. The evidence is cheap: a manifest with class names says
every sample has a ``.cls`` (pack writes one for each); otherwise the first sample of the first
shard says which members the samples carry (one read of its headers, only the label member's
bytes kept). A source whose first sample lacks the label's member is a one-line ConfigError
naming the shard and the fix (``label=None``). A shard that cannot be read here is left to the
loader's own reads (and ``on_error``). A remote shard is not read for the check: the loader
reads a remote data set's bytes once (an index, or the header scan, then each epoch), and a
probe GET would add a shard's worth of bytes per source (a 170 KB shard came whole over HTTP);
there a missing label still fails at the first batch, naming the sample.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from loaders.schema import SampleSchema
from loaders.source import DatasetIndex, ShardAccess
from wdstool.base.errors import ConfigError, WdsToolError
from wdstool.base.urls import is_remote
from wdstool.format.shard_formats import format_for

log = logging.getLogger(__name__)


def first_sample_members(url: str, access: ShardAccess, wanted: str) -> tuple[str, list[str], bool]:
    """(key, member extensions, whether ``wanted`` is one of them) of the first sample of the
    shard ``url``, reading its headers and only the ``wanted`` member's bytes (not through the
    cache: a shard's first bytes are not worth a copy). ("", [], True) for an empty shard."""
    seen: list[str] = []

    def keep(ext: str) -> bool:
        seen.append(ext)
        return ext == wanted

    with replace(access, cache_dir=None, cache_limit=None).open(url) as f:
        for sample in format_for(url).read(f, url, keep=keep):
            return sample.key, sorted(set(seen)), wanted in sample.parts
    return "", [], True


def check_label(index: DatasetIndex, schema: SampleSchema, access: ShardAccess) -> None:
    """ConfigError (one line, naming the first shard and ``label=None``) where the source's
    samples lack the label's member: from the manifest's classes (``label="cls"``), else the
    first sample of the first shard (a local one: remote shards are not read for this)."""
    label = schema.label
    if label is None or not index.urls:
        return
    if label.ext == "cls" and index.classes:  # pack wrote a .cls for every sample
        return
    url = index.urls[0]
    if is_remote(url):
        return
    try:
        key, members, found = first_sample_members(url, access, label.ext)
    except (WdsToolError, OSError) as exc:  # the loader's reads report it, under on_error
        log.debug("label check skipped: %s: %s", url, exc)
        return
    if found:
        return
    spec = label.field.text
    has = " ".join(f".{m}" for m in members) or "no members"
    why = "its index lists no classes and " if index.from_manifest and label.ext == "cls" else ""
    raise ConfigError(
        f"{url}: label={spec!r}, but {why}its first sample {key!r} has no .{label.ext} member "
        f"(it has {has}): pass label=None to read it without labels"
        + ("" if label.ext == "json" else ", or label='json:PATH' for one inside .json")
    )


__all__ = ["check_label", "first_sample_members"]
