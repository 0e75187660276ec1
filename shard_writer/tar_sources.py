"""Reshard's SRCs: which shards each names, and what every shard holds, from its headers.

A SRC is one of our data sets (a folder or prefix with ``index.json``, or the manifest's URL),
a folder or prefix of ``.tar`` files written by any tool, or a brace pattern / one shard's URL.
:func:`scan_shard` (a task the engine runs, one per source shard) lists a shard's samples with
where each member lies; only the image member's bytes are read, and only when they are needed
(``--dedupe`` hashes it, ``--max-side``/``--quality`` re-encode it to learn its stored size).
A member is never interpreted otherwise: ``.pyd``, ``.npy``, anything, is carried as bytes.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from typing import Any

from shard_writer.image import BadImage
from shard_writer.probe import EncodeOptions
from wdstool.base.errors import InputError, ShardError, StorageError, WdsToolError
from wdstool.base.remote import open_shard
from wdstool.format.images import IMAGE_ORDER
from wdstool.format.manifest import ManifestNotFound, load_manifest, resolve_shard_url
from wdstool.format.shardlist import expand, is_pattern, tars_in
from wdstool.format.tar_index import sample_spans, suffix_of
from wdstool.format.tar_safety import printable_name, unsafe_reasons

_RANK = {ext: i for i, ext in enumerate(IMAGE_ORDER)}


@dataclass(frozen=True, kw_only=True)
class SourceSet:
    """One SRC: its shards in order and, from its manifest, its classes (None without one)."""

    name: str
    urls: tuple[str, ...]
    classes: tuple[str, ...] | None = None


def resolve_srcs(srcs: list[str], storage_options: dict[str, Any] | None) -> list[SourceSet]:
    """Each SRC's shards; a SRC naming nothing is a one-line InputError."""
    out = []
    for src in srcs:
        if is_pattern(src):
            out.append(SourceSet(name=src, urls=tuple(expand(src))))
            continue
        try:
            manifest, base = load_manifest(src, storage_options)
        except ManifestNotFound:
            urls = tars_in(src, storage_options)
            if not urls:
                raise InputError(
                    f"{src}: neither a data set (no index.json) nor a folder of .tar shards"
                ) from None
            out.append(SourceSet(name=src, urls=tuple(urls)))
            continue
        except (ShardError, StorageError) as exc:
            raise InputError(exc.message) from None
        urls = tuple(resolve_shard_url(base, s.url) for s in manifest.shards)
        out.append(SourceSet(name=src, urls=urls, classes=manifest.classes))
    return out


@dataclass(frozen=True, slots=True)
class Piece:
    """The members of one sample that lie in one source shard: bytes ``[start, end)`` of shard
    ``shard`` hold them; ``members``: (suffix after the key, data offset, size), in order."""

    shard: int
    start: int
    end: int
    members: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class Found:
    """One sample as found in one shard. ``image``: its image member (the first by the loaders'
    image order), -1 without one; ``digest``: that member's sha256 (``--dedupe``);
    ``payload``/``image_suffix``: its stored size and suffix when re-encoded (-1 / "" when copied
    as is); ``problem``: why it cannot be carried ("" when it can)."""

    key: str
    piece: Piece
    image: int = -1
    digest: bytes | None = None
    payload: int = -1
    image_suffix: str = ""
    problem: str = ""


@dataclass(frozen=True, kw_only=True)
class ShardScan:
    shard: int
    samples: tuple[Found, ...]
    damage: str = ""  # why the scan stopped early ("": it read the whole shard)


def image_rank(suffix: str) -> int:
    """Where a member's extension stands in the loaders' image order (past the end: no image)."""
    return _RANK.get(suffix.rsplit(".", 1)[-1].lower(), len(_RANK))


def image_member(members: tuple[tuple[str, int, int], ...]) -> int:
    """The index of the image member (the loaders' choice among image extensions), or -1."""
    best, rank = -1, len(_RANK)
    for i, (suffix, _off, _size) in enumerate(members):
        r = image_rank(suffix)
        if r < rank:
            best, rank = i, r
    return best


def scan_shard(
    url: str,
    shard: int,
    storage_options: dict[str, Any] | None,
    digest: bool,
    encode: EncodeOptions,
) -> ShardScan:
    """Every sample of one shard (a task: runs in the engine's workers). A shard that cannot be
    opened or is damaged returns what was read before and the reason (``damage``)."""
    samples: list[Found] = []
    try:
        with open_shard(url, storage_options, local_buffer=0) as f:
            for span in sample_spans(f, url):
                members = tuple(  # interned: every sample has the same few suffixes
                    (sys.intern(suffix_of(span.key, m.name)), m.data_offset, m.size)
                    for m in span.members
                )
                piece = Piece(shard, span.start, span.end, members)
                problem = _unsafe(span.key, members)
                samples.append(Found(span.key, piece, image_member(members), problem=problem))
        if digest or encode.rewrites:
            samples = _read_images(url, storage_options, samples, digest, encode)
    except WdsToolError as exc:
        return ShardScan(shard=shard, samples=tuple(samples), damage=exc.message)
    except OSError as exc:
        return ShardScan(shard=shard, samples=tuple(samples), damage=f"{url}: {exc}")
    return ShardScan(shard=shard, samples=tuple(samples))


def _unsafe(key: str, members: tuple[tuple[str, int, int], ...]) -> str:
    for suffix, _off, _size in members:
        reasons = unsafe_reasons(key + suffix)
        if reasons:
            return f"member '{printable_name(key + suffix)}' is unsafe: {', '.join(reasons)}"
    return ""


def _read_images(
    url: str,
    storage_options: dict[str, Any] | None,
    samples: list[Found],
    digest: bool,
    encode: EncodeOptions,
) -> list[Found]:
    """Read each sample's image member (one forward pass over the shard): hash it, or
    re-encode it to learn the bytes it will store."""
    out = []
    with open_shard(url, storage_options) as f:
        for s in samples:
            if s.image < 0 or s.problem:
                out.append(s)
                continue
            suffix, off, size = s.piece.members[s.image]
            f.seek(off)
            data = f.read(size)
            if len(data) != size:
                raise ShardError(f"{url}: truncated member data at offset {off}")
            h = hashlib.sha256(data).digest() if digest else None
            payload, new_suffix, problem = -1, "", ""
            if encode.rewrites:  # reshard learns the stored size by rewriting
                payload, new_suffix, problem = _reencoded(s, data, suffix, encode)
            out.append(
                Found(s.key, s.piece, s.image, h, payload, new_suffix, problem)  # same piece
            )
    return out


def _reencoded(s: Found, data: bytes, suffix: str, encode: EncodeOptions) -> tuple[int, str, str]:
    """(stored size, the member's new suffix or "", problem) of a re-encoded image member."""
    try:
        img = encode.apply(data)
    except BadImage as exc:
        return -1, "", f"{s.key}{suffix}: {exc}"
    stem, _, ext = suffix.rpartition(".")
    same = ext.lower() == img.ext or (ext.lower() == "jpeg" and img.ext == "jpg")
    new = "" if same else f"{stem}.{img.ext}"
    if new and any(m[0] == new for m in s.piece.members):
        return -1, "", f"{s.key}{suffix}: re-encoded as {img.ext}, it would clash with {s.key}{new}"
    return len(img.payload), new, ""
