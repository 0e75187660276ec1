"""Where a data set's counts come from without reading its shards: index files beside them.

A source's shards and their sample counts are read, in this order, from:

1. ``index.json``: ours (``wdstool pack``), or any wids shard index (``filesize`` optional),
   or the index ``wdstool index SOURCE --out PATH`` writes for shards you cannot write next to
   (with each sample's offset);
2. timm's ``_info.json`` (or ``info.json``): ``{"splits": {NAME: {"filenames": [...],
   "shard_lengths": [...]}}}``; a source names a split as ``ROOT/_info.json#NAME``, or by its
   shards (a brace pattern is matched against every split's file names);
3. nothing: the reader scans the shards' headers (once per data set, ``loaders.source``).

Names are resolved against the index's folder. A server that cannot be reached is an error
that says so; only a real "not there" moves on to the next candidate.
"""

from __future__ import annotations

import json
from typing import Any

from wdstool.base.errors import ShardError
from wdstool.format.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestNotFound,
    ShardEntry,
    base_url_of,
    manifest_from_json,
    resolve_shard_url,
)
from wdstool.format.shardlist import expand, is_pattern, tars_in

INDEX_NAMES = (MANIFEST_NAME, "_info.json", "info.json")


def split_fragment(source: str) -> tuple[str, str | None]:
    """``ROOT/_info.json#train`` -> (``ROOT/_info.json``, ``train``)."""
    if "#" in source:
        url, _, split = source.rpartition("#")
        return url, split or None
    return source, None


def _timm_split(obj: dict[str, Any], split: str | None, where: str) -> Manifest:
    splits = obj.get("splits")
    if not isinstance(splits, dict) or not splits:
        raise ShardError(f"{where}: malformed _info.json: no 'splits'")
    if split is None:
        if len(splits) != 1:
            names = ", ".join(sorted(splits))
            raise ShardError(
                f"{where}: several splits ({names}): name one, e.g. {where}#{sorted(splits)[0]}"
            )
        split = next(iter(splits))
    if split not in splits:
        raise ShardError(f"{where}: no split {split!r} (it has {', '.join(sorted(splits))})")
    return Manifest(shards=_timm_entries(splits[split], f"{where}#{split}"), name=split)


def _timm_entries(info: Any, where: str) -> tuple[ShardEntry, ...]:
    try:
        names, lengths = info["filenames"], info["shard_lengths"]
        if len(names) != len(lengths) or not all(
            isinstance(n, str) and type(c) is int and c >= 0
            for n, c in zip(names, lengths, strict=True)
        ):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise ShardError(
            f"{where}: malformed _info.json split: needs 'filenames' and 'shard_lengths' of "
            "one length"
        ) from None
    return tuple(ShardEntry(n, c, -1, "") for n, c in zip(names, lengths, strict=True))


def parse_index(data: bytes, url: str, split: str | None = None) -> Manifest:
    """An index file's shards: ours or a wids index, or timm's ``_info.json`` (one split)."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ShardError(f"{url}: not a valid JSON index: {exc}") from None
    if isinstance(obj, dict) and "splits" in obj and "shardlist" not in obj:
        return _timm_split(obj, split, url)
    if split is not None:
        raise ShardError(f"{url}#{split}: only timm's _info.json has splits")
    return manifest_from_json(obj, url)


def _candidates(url: str) -> list[str]:
    """The index files a source may name: itself (a ``.json``), else each of INDEX_NAMES in it."""
    if url.endswith(".json"):
        return [url]
    return [url.rstrip("/") + "/" + name for name in INDEX_NAMES]


def find_index(source: str, storage_options: dict[str, Any] | None = None) -> tuple[Manifest, str]:
    """The index of ``source`` (an index file's URL, ``…/_info.json#SPLIT``, or a folder or
    prefix holding one of ``index.json``, ``_info.json``, ``info.json``) and the URL its shard
    names are relative to. ManifestNotFound when there is none; a server that cannot be reached
    is a StorageError (not "none")."""
    from wdstool.base.s3 import read_object

    url, split = split_fragment(source)
    candidates = _candidates(url)
    for candidate in candidates:
        try:
            data = read_object(candidate, storage_options)
        except FileNotFoundError:
            continue
        return parse_index(data, candidate, split), base_url_of(candidate)
    names = " or ".join(INDEX_NAMES)
    raise ManifestNotFound(
        f"{candidates[0]}: no index found ({names}): pack it with `wdstool pack`, write one "
        "for shards you cannot write next to with `wdstool index SOURCE --out PATH`, or pass "
        "a brace pattern of shard URLs"
    )


def index_version(
    source: str, storage_options: dict[str, Any] | None = None
) -> tuple[str, str] | None:
    """The index :func:`find_index` would read for ``source`` and its version
    (``object_version``: a stat or a HEAD, nothing read), for a cache of what it says; None
    for a brace pattern, a split of timm's ``_info.json``, no index, or one whose version
    cannot be told."""
    from wdstool.base.s3 import object_version

    if is_pattern(source):
        return None
    url, split = split_fragment(source)
    if split is not None:
        return None
    for candidate in _candidates(url):
        try:
            version = object_version(candidate, storage_options)
        except Exception:  # an unreachable store: find_index says so, in its words
            return None
        if version is not None:
            return candidate, version
    return None


def index_for(urls: list[str], storage_options: dict[str, Any] | None = None) -> Manifest | None:
    """An index in the folder of these shards that counts every one of them (timm's: over all
    its splits), as a manifest of just these shards in this order; None where there is none."""
    folders = {u.rsplit("/", 1)[0] for u in urls if "/" in u}
    if len(folders) != 1:
        return None
    folder = folders.pop()
    from wdstool.base.s3 import read_object

    for name in INDEX_NAMES:
        candidate = f"{folder}/{name}"
        try:
            data = read_object(candidate, storage_options)
        except FileNotFoundError:
            continue
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(obj, dict) and isinstance(obj.get("splits"), dict):
            entries = [
                e
                for i, info in enumerate(obj["splits"].values())
                for e in _timm_entries(info, f"{candidate} split {i}")
            ]
        else:
            try:
                entries = list(manifest_from_json(obj, candidate).shards)
            except ShardError:
                continue
        by_url = {resolve_shard_url(folder, e.url): e for e in entries}
        if all(u in by_url for u in urls):
            return Manifest(shards=tuple(by_url[u]._replace(url=u) for u in urls))
    return None


def index_or_shards(
    source: str, storage_options: dict[str, Any] | None = None
) -> tuple[Manifest | None, str, list[str]]:
    """What a SOURCE names: (its index, the URL its names are relative to, []) where it has
    one (for a brace pattern, an index in the shards' folder that lists them all), else (None,
    "", its shard URLs: the pattern's, or the ``.tar`` files of a folder or prefix) to count by
    a header scan. ManifestNotFound where it names neither."""
    if is_pattern(source):
        urls = expand(source)
        listed = index_for(urls, storage_options)
        return (listed, "", []) if listed is not None else (None, "", urls)
    try:
        manifest, base = find_index(source, storage_options)
    except ManifestNotFound:
        urls = tars_in(source, storage_options)
        if not urls:
            raise
        return None, "", urls  # their folder was searched for an index already
    return manifest, base, []


__all__ = [
    "INDEX_NAMES",
    "find_index",
    "index_for",
    "index_or_shards",
    "index_version",
    "parse_index",
    "split_fragment",
]
