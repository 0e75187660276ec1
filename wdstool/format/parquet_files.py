"""Which Parquet files a source names, with their sizes and versions, from one listing.

Both sides list Parquet sources here: the loaders (which then read the footers and the row
groups in place) and ``pack`` (which converts a whole split at once). A source is

- a local file, folder (every ``.parquet`` beneath it) or glob (``data/train-*.parquet``);
- ``s3://`` (or another fsspec URL): one object, a prefix, or a glob, listed once;
- ``http(s)://``: one file or a brace pattern (``.../train-{00000..00003}.parquet``): no listing
  exists, so each file's size comes from a HEAD;
- ``hf://datasets/ORG/NAME[@REV][/PATH]``: the repository's files from the Hub's tree API
  (``HF_ENDPOINT``) under PATH (the whole repository without one), or a glob of them.

``#SPLIT`` after any of them keeps one split: files named as ``datasets`` names them
(``train-00000-of-00004.parquet``, ``train.parquet``) or in a folder named after it
(``.../train/0000.parquet``, the Hub's Parquet conversion). Where the files hold several splits
and none is named, the error lists them. Files come sorted by URL: the order the plan numbers
their row groups in.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import braceexpand

from wdstool.base.credentials import redact
from wdstool.base.errors import ShardError, StorageError
from wdstool.base.retry import DEFAULT_RETRY, describe
from wdstool.base.s3 import filesystem
from wdstool.base.urls import is_remote, local_path
from wdstool.base.web import (
    HF_DEFAULT_ENDPOINT,
    check_status,
    hf_token,
    is_web,
    request,
    web_size,
)
from wdstool.format.indexes import split_fragment

SUFFIX = ".parquet"
_GLOB = re.compile(r"[*?\[]")
# datasets' file names (SPLIT-00000-of-00004.parquet), the Hub's conversion (SPLIT/0000.parquet),
# and the usual split names before .parquet or a dash
_SHARDED = re.compile(r"^(?P<split>\w+?)-\d{5}-of-\d{5}\.parquet$")
_NUMBERED = re.compile(r"^\d+\.parquet$")
_USUAL = re.compile(r"^(?P<split>train|test|validation|valid|val|dev)(?:[-.][^/]*)?\.parquet$")
_HF = re.compile(
    r"^hf://datasets/(?P<org>[^/]+)/(?P<name>[^/@]+)(?:@(?P<rev>[^/]+))?/?(?P<path>.*)$"
)


@dataclass(frozen=True)
class ParquetObject:
    """One Parquet file: where, how many bytes, and what tells this version from the next
    (None where nothing does: the file is then never cached by version)."""

    url: str
    size: int
    version: str | None = None


class NoParquet(ShardError):
    """A source that names no ``.parquet`` file."""


def is_parquet_source(source: str) -> bool:
    """Does ``source`` name Parquet files by its form alone (a ``.parquet`` file, glob or brace
    pattern)?"""
    url, _split = split_fragment(source)
    return url.lower().rstrip("/").endswith(SUFFIX)


def hub_folder(source: str) -> bool:
    """Is ``source`` a Hub data set repository or a folder of one (not a tar pattern, a tar or
    an index)? Its files say whether it is Parquet: one listing, which it needs anyway."""
    m = _HF.match(split_fragment(source)[0])
    if m is None:
        return False
    path = m.group("path").lower().rstrip("/")
    return not (path.endswith((".tar", ".json")) or "{" in path)


def parquet_in(folder: str, storage_options: dict[str, Any] | None) -> bool:
    """Are there ``.parquet`` files in a folder or prefix, or one or two levels below it (the
    Hub's conversion: ``default/train/0000.parquet``)? A folder with neither a manifest nor
    tar shards is read as Parquet where this holds."""
    patterns = ("/*", "/*/*", "/*/*/*")
    if is_remote(folder):
        try:
            fs, path = filesystem(folder, storage_options)
            return any(fs.glob(path.rstrip("/") + p + SUFFIX) for p in patterns)
        except Exception:
            return False
    import glob

    path = local_path(folder)
    return os.path.isdir(path) and any(glob.glob(path.rstrip("/") + p + SUFFIX) for p in patterns)


def list_parquet(
    source: str, storage_options: dict[str, Any] | None = None, *, split: str | None = None
) -> list[ParquetObject]:
    """The Parquet files ``source`` names (``#SPLIT`` or ``split`` keeps one split), sorted by
    URL; a one-line error naming the source where it names none or several splits unasked."""
    url, fragment = split_fragment(source)
    split = split or fragment
    if url.startswith("hf://"):
        found = _hub_files(url, storage_options)
    elif is_web(url):
        found = _web_files(url, storage_options)
    elif is_remote(url):
        found = _fs_files(url, storage_options)
    else:
        found = _local_files(url)
    if not found:
        raise NoParquet(f"{source}: no .parquet files there")
    found = sorted(found, key=lambda o: o.url)
    splits = {o.url: split_of(o.url) for o in found}
    if split is not None:
        kept = [o for o in found if splits[o.url] == split]
        if not kept:
            have = ", ".join(sorted({s for s in splits.values() if s})) or "none named"
            raise ShardError(f"{source}: no files of split {split!r} (splits: {have})")
        return kept
    named = sorted({s for s in splits.values() if s})
    if len(named) > 1 and all(splits.values()):
        raise ShardError(
            f"{source}: holds the splits {', '.join(named)}: name one, e.g. {url}#{named[0]}"
        )
    return found


def split_of(url: str) -> str | None:
    """The split a file belongs to by the names ``datasets`` and the Hub give it
    (``train-00000-of-00004.parquet``; ``train/0000.parquet``; ``test.parquet`` or
    ``validation-*.parquet`` for the usual split names), else None."""
    parts = url.split("?")[0].rstrip("/").split("/")
    name = parts[-1]
    m = _SHARDED.match(name)
    if m is not None:
        return m["split"]
    if len(parts) >= 2 and _NUMBERED.match(name) and parts[-2] and not parts[-2].isdigit():
        return parts[-2]
    m = _USUAL.match(name)
    return m["split"] if m is not None else None


def _local_files(url: str) -> list[ParquetObject]:
    path = local_path(url)
    if _GLOB.search(path):
        import glob

        names = [p for p in glob.glob(path, recursive=True) if p.endswith(SUFFIX)]
    elif os.path.isdir(path):
        names = [
            os.path.join(d, n)
            for d, _dirs, files in os.walk(path)
            for n in files
            if n.endswith(SUFFIX)
        ]
    elif os.path.isfile(path):
        names = [path]
    else:
        raise ShardError(f"{url}: no such file or folder")
    out = []
    for n in names:
        st = os.stat(n)
        out.append(ParquetObject(n, st.st_size, f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"))
    return out


def _fs_files(url: str, storage_options: dict[str, Any] | None) -> list[ParquetObject]:
    try:
        fs, path = filesystem(url, storage_options)
        fs.invalidate_cache()
        if _GLOB.search(path):
            info = fs.glob(path, detail=True)
        elif path.endswith(SUFFIX):
            info = {path: fs.info(path)}
        else:
            info = fs.find(path.rstrip("/"), detail=True)
    except FileNotFoundError:
        raise ShardError(f"{url}: not found") from None
    except Exception as exc:
        raise StorageError(
            redact(f"{url}: cannot list: {describe(exc)}", storage_options)
        ) from None
    out = []
    for p, meta in sorted(info.items()):
        if not p.endswith(SUFFIX) or meta.get("type") == "directory":
            continue
        size = int(meta.get("size") or meta.get("Size") or 0)
        tag = meta.get("ETag") or meta.get("etag") or meta.get("mtime") or meta.get("LastModified")
        out.append(ParquetObject(fs.unstrip_protocol(p), size, f"{size}:{tag}" if tag else None))
    return out


def _web_files(url: str, storage_options: dict[str, Any] | None) -> list[ParquetObject]:
    urls = sorted(braceexpand.braceexpand(url)) if "{" in url else [url]
    with ThreadPoolExecutor(min(16, len(urls))) as pool:
        sizes = list(pool.map(lambda u: web_size(u, storage_options), urls))
    return [ParquetObject(u, s) for u, s in zip(urls, sizes, strict=True)]


def _hub_files(url: str, storage_options: dict[str, Any] | None) -> list[ParquetObject]:
    """The Hub's tree API: ``GET /api/datasets/ORG/NAME/tree/REV/PATH?recursive=true``
    (paginated by ``Link: <...>; rel="next"``); a PATH naming one file is that file."""
    m = _HF.match(url)
    if m is None:
        raise ShardError(f"{url}: not an hf:// data set URL (hf://datasets/ORG/NAME[/PATH])")
    org, name, rev, path = m["org"], m["name"], m["rev"] or "main", m["path"].rstrip("/")
    base = f"hf://datasets/{org}/{name}" + (f"@{rev}" if m["rev"] else "")
    if path.endswith(SUFFIX) and not _GLOB.search(path):
        return [ParquetObject(url, web_size(url, storage_options))]
    folder = (
        path if not _GLOB.search(path) else path[: _GLOB.search(path).start()].rpartition("/")[0]
    )
    endpoint = os.environ.get("HF_ENDPOINT", HF_DEFAULT_ENDPOINT).rstrip("/")
    api: str | None = (
        f"{endpoint}/api/datasets/{org}/{name}/tree/{quote(unquote(rev), safe='')}"
        + (f"/{quote(folder)}" if folder else "")
        + "?recursive=true"
    )
    entries: list[dict[str, Any]] = []
    while api:
        body, link = DEFAULT_RETRY.call(url, lambda a=api: _get_json(a, url, storage_options))
        entries.extend(body)
        api = _next_link(link)
    out = []
    for e in entries:
        p = e.get("path", "")
        if e.get("type") != "file" or not p.endswith(SUFFIX):
            continue
        if _GLOB.search(path) and not fnmatch.fnmatchcase(p, path):
            continue
        lfs = e.get("lfs") or {}
        version = lfs.get("oid") or e.get("oid")
        out.append(ParquetObject(f"{base}/{p}", int(e.get("size", 0)), version))
    return out


def _get_json(api: str, url: str, storage_options: dict[str, Any] | None) -> tuple[Any, str]:
    token = hf_token(storage_options)
    resp = request(
        api, storage_options, headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    try:
        if resp.status == 404:
            raise ShardError(f"{url}: no such data set repository or folder on the Hub")
        check_status(url, resp.status)
        return json.loads(resp.read()), resp.headers.get("Link", "")
    finally:
        resp.release_conn()


def _next_link(link: str) -> str | None:
    for part in link.split(","):
        if 'rel="next"' in part:
            return part.split(";")[0].strip().strip("<>")
    return None


__all__ = [
    "NoParquet",
    "ParquetObject",
    "hub_folder",
    "is_parquet_source",
    "list_parquet",
    "parquet_in",
    "split_of",
]
