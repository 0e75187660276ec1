"""``index.json``: the one manifest schema, written by pack and read by loaders and verify.

It follows the wids shard-index layout so other tools read it (``__kind__``, ``wids_version``,
``shardlist`` of ``{url, nsamples, filesize}``) and adds our fields: sha256 per shard, classes,
totals, pack options, a fingerprint of the layout, the skipped inputs and a format version, and,
once something was appended, the version history (:mod:`wdstool.format.versions`); a data set
with videos says how many and their duration in all (``"videos": {"count", "seconds"}``, absent
without videos, so an image data set's manifest is what it always was); one of samples with
several images and texts keeps, per shard, each sample's image count, image sizes and text
length (``"interleaved"``: :mod:`wdstool.format.interleaved` describes the lists), and their
totals at the top (``"interleaved": {"samples", "images", "chars"}``), both absent otherwise;
``"sample_offsets"`` names the file of every sample's byte offset written beside it
(:mod:`wdstool.format.sample_offsets`). Shard URLs are relative to the manifest. Serialisation is canonical (sorted keys, fixed
separators), so the same dataset always gives the same bytes.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from wdstool.base.errors import ShardError
from wdstool.format.interleaved import (
    InterleavedShard,
    InterleavedTotals,
    compact_lists,
    totals,
)
from wdstool.format.sample_offsets import OffsetsFile, read_all, shards_digest
from wdstool.format.versions import Version, parse_versions

MANIFEST_NAME = "index.json"
FORMAT = "wdstool-manifest"
FORMAT_VERSION = 1


class ManifestNotFound(ShardError):
    """There is no manifest at the URL (as opposed to one that cannot be read or parsed)."""


class ShardEntry(NamedTuple):
    """One shard of the manifest (a named tuple: 100,000 of them are built in ~0.03 s).
    ``filesize`` -1: not known (optional in a wids index); ``offsets``: where each sample's
    first header starts, when the index says (``wdstool index --out`` writes them), so a
    reader can start inside the shard. (A shard of samples with several images has its
    facts in :attr:`Manifest.facts`: readers unpack these five fields at once.)"""

    url: str
    nsamples: int
    filesize: int
    sha256: str
    offsets: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": self.url,
            "nsamples": self.nsamples,
            "filesize": self.filesize,
            "sha256": self.sha256,
        }
        if self.offsets is not None:
            out["offsets"] = list(self.offsets)
        return out


class VideoTotals(NamedTuple):
    """How many samples are videos, and their duration in all (seconds), as pack probed them."""

    count: int = 0
    seconds: float = 0.0

    def plus(self, other: VideoTotals) -> VideoTotals:
        return VideoTotals(self.count + other.count, self.seconds + other.seconds)

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "seconds": round(self.seconds, 3)}


NO_VIDEOS = VideoTotals()


@dataclass(frozen=True, kw_only=True)
class Manifest:
    shards: tuple[ShardEntry, ...]
    classes: tuple[str, ...] = ()
    fingerprint: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    skipped: tuple[dict[str, str], ...] = ()
    name: str = ""
    versions: tuple[Version, ...] = ()  # () until something is appended
    videos: VideoTotals = NO_VIDEOS  # recorded by pack (reshard and split do not count them)
    # per shard, the facts of its samples of several images (None: a shard of other samples);
    # () for a data set without any
    facts: tuple[InterleavedShard | None, ...] = ()
    # every sample's offset, in a file beside the manifest (pack writes it; None: not recorded)
    sample_offsets: OffsetsFile | None = None

    def __post_init__(self) -> None:
        if self.facts and len(self.facts) != len(self.shards):
            raise ValueError(f"{len(self.facts)} shards' facts for {len(self.shards)} shards")

    @property
    def num_samples(self) -> int:
        return sum(s.nsamples for s in self.shards)

    @property
    def total_bytes(self) -> int:
        return sum(s.filesize for s in self.shards)

    @property
    def shard_sizes(self) -> list[int]:
        return [s.nsamples for s in self.shards]

    @property
    def interleaved(self) -> InterleavedTotals | None:
        """Samples, images and text characters of the shards of samples with several images
        (None: a data set without them)."""
        return totals(self.facts)

    def to_json(self) -> dict[str, Any]:
        out = {
            "__kind__": "wids-shard-index-v1",
            "wids_version": 1,
            "name": self.name,
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "fingerprint": self.fingerprint,
            "num_samples": self.num_samples,
            "total_bytes": self.total_bytes,
            "num_shards": len(self.shards),
            "classes": list(self.classes),
            "pack_options": self.options,
            "skipped": list(self.skipped),
            "shardlist": [s.to_json() for s in self.shards],
        }
        for entry, facts in zip(out["shardlist"], self.facts, strict=False):
            if facts is not None:
                entry["interleaved"] = facts.to_json()
        if self.versions:  # a data set never appended to keeps the manifest it always had
            out["versions"] = [v.to_json() for v in self.versions]
        if self.videos.count:
            out["videos"] = self.videos.to_json()
        if self.sample_offsets is not None:
            out["sample_offsets"] = self.sample_offsets.to_json()
        interleaved = self.interleaved
        if interleaved is not None:
            out["interleaved"] = interleaved.to_json()
        return out

    def dumps(self) -> bytes:
        obj = self.to_json()
        lists: dict[str, Any] = {}
        for n, entry in enumerate(obj["shardlist"]):
            facts = entry.get("interleaved")
            if facts is not None:  # each list on one line: a line per number is ~3x larger
                for name in sorted(facts):
                    token = f"\0interleaved {n} {name}\0"
                    lists[token], facts[name] = facts[name], token
        text = json.dumps(obj, indent=1, sort_keys=True)
        return (compact_lists(text, lists) + "\n").encode("ascii")


def _need(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise ShardError(f"{where}: malformed manifest: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ShardError(f"{where}: malformed manifest: field {key!r} has the wrong type")
    return value


def parse_manifest(data: bytes | str, where: str) -> Manifest:
    """Parse and validate manifest bytes; ``where`` (its URL) goes into every error."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ShardError(f"{where}: not a valid JSON manifest: {exc}") from None
    return manifest_from_json(obj, where)


def manifest_from_json(obj: Any, where: str) -> Manifest:
    """Validate a manifest already decoded from JSON (as :func:`parse_manifest`)."""
    if not isinstance(obj, dict):
        raise ShardError(f"{where}: malformed manifest: top level is not an object")
    if obj.get("__kind__") not in (None, "wids-shard-index-v1"):
        raise ShardError(f"{where}: unknown manifest kind {obj.get('__kind__')!r}")
    version = obj.get("format_version", FORMAT_VERSION)
    if obj.get("format", FORMAT) == FORMAT and version != FORMAT_VERSION:
        raise ShardError(
            f"{where}: manifest format version {version!r} is not supported "
            f"(this wdstool reads version {FORMAT_VERSION}); upgrade wdstool or re-pack"
        )
    shardlist = _need(obj, "shardlist", list, where)
    shards = []
    facts: list[InterleavedShard | None] = []
    seen: set[str] = set()
    for n, raw in enumerate(shardlist):
        # the common case in one expression (type() is, not isinstance: bool is not an int
        # here); anything unusual goes through the checks that name the problem
        if (
            type(raw) is dict
            and type(url := raw.get("url")) is str
            and type(nsamples := raw.get("nsamples")) is int
            and type(filesize := raw.get("filesize", -1)) is int
            and type(sha := raw.get("sha256", "")) is str
            and nsamples >= 0
            and url
            and url not in seen
        ):
            seen.add(url)
            offsets = raw.get("offsets")
            if offsets is not None:
                offsets = _offsets(offsets, nsamples, f"{where} shardlist[{n}]")
            shards.append(ShardEntry(url, nsamples, filesize, sha, offsets))
            raw_facts = raw.get("interleaved")
            facts.append(
                None
                if raw_facts is None
                else InterleavedShard.from_json(raw_facts, nsamples, f"{where} shardlist[{n}]")
            )
            continue
        at = f"{where} shardlist[{n}]"
        if not isinstance(raw, dict):
            raise ShardError(f"{at}: malformed manifest: entry is not an object")
        url = _need(raw, "url", str, at)
        nsamples = _need(raw, "nsamples", int, at)
        if nsamples < 0:
            raise ShardError(f"{at}: malformed manifest: negative nsamples {nsamples}")
        if not url or url in seen:
            raise ShardError(f"{at}: malformed manifest: empty or duplicate url {url!r}")
        # url and nsamples are fine: what the fast path refused is filesize's or sha256's type
        raise ShardError(f"{at}: malformed manifest: bad filesize or sha256")
    offsets_file = obj.get("sample_offsets")
    if offsets_file is not None:
        offsets_file = OffsetsFile.from_json(
            offsets_file, sum(s.nsamples for s in shards), where, shards_digest(shards)
        )
    classes = obj.get("classes", [])
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise ShardError(f"{where}: malformed manifest: 'classes' must be a list of names")
    options = obj.get("pack_options", {})
    skipped = obj.get("skipped", [])
    return Manifest(
        shards=tuple(shards),
        classes=tuple(classes),
        fingerprint=str(obj.get("fingerprint", "")),
        options=options if isinstance(options, dict) else {},
        skipped=tuple(s for s in skipped if isinstance(s, dict))
        if isinstance(skipped, list)
        else (),
        name=str(obj.get("name", "")),
        versions=parse_versions(obj.get("versions"), len(shards), where),
        videos=_videos(obj.get("videos"), where),
        facts=tuple(facts) if any(f is not None for f in facts) else (),
        sample_offsets=offsets_file,
    )


def _videos(raw: Any, where: str) -> VideoTotals:
    """A manifest's ``videos`` (absent: none counted)."""
    if raw is None:
        return NO_VIDEOS
    count = raw.get("count") if isinstance(raw, dict) else None
    seconds = raw.get("seconds") if isinstance(raw, dict) else None
    if (
        type(count) is not int
        or count < 0
        or type(seconds) not in (int, float)
        or not (math.isfinite(seconds) and seconds >= 0)
    ):
        raise ShardError(
            f"{where}: malformed manifest: 'videos' must be "
            '{"count": an int >= 0, "seconds": a number >= 0}'
        )
    return VideoTotals(count, float(seconds))


def _offsets(raw: Any, nsamples: int, at: str) -> tuple[int, ...]:
    """A shard's sample offsets: nsamples non-decreasing ints from 0 up."""
    if (
        not isinstance(raw, list)
        or len(raw) != nsamples
        or not all(type(v) is int and v >= 0 for v in raw)
        or any(b < a for a, b in itertools.pairwise(raw))
    ):
        raise ShardError(
            f"{at}: malformed index: 'offsets' must list {nsamples} increasing byte offsets"
        )
    return tuple(raw)


def build_manifest(
    entries: Sequence[ShardEntry],
    *,
    classes: Sequence[str],
    fingerprint: str,
    options: dict[str, Any],
    skipped: Sequence[dict[str, str]],
    name: str = "",
    versions: Sequence[Version] = (),
    videos: VideoTotals = NO_VIDEOS,
    facts: Sequence[InterleavedShard | None] = (),
    sample_offsets: OffsetsFile | None = None,
) -> Manifest:
    """A manifest of ``entries``; ``facts``: per entry, its samples of several images' facts
    (None for a shard of other samples; all None or empty: a data set without them);
    ``sample_offsets``: the offsets file written beside it."""
    return Manifest(
        shards=tuple(entries),
        classes=tuple(classes),
        fingerprint=fingerprint,
        options=dict(options),
        skipped=tuple(sorted(skipped, key=lambda s: s["path"])),
        name=name,
        versions=tuple(versions),
        videos=videos,
        facts=tuple(facts) if any(f is not None for f in facts) else (),
        sample_offsets=sample_offsets,
    )


def manifest_url_for(source: str) -> str:
    """The manifest URL for a dataset source: the source itself if it names a .json file,
    else ``<source>/index.json`` (a folder or prefix)."""
    if source.endswith(".json"):
        return source
    return source.rstrip("/") + "/" + MANIFEST_NAME


def base_url_of(manifest_url: str) -> str:
    """The folder/prefix that relative shard URLs in a manifest are resolved against."""
    if "/" not in manifest_url:
        return "."
    return manifest_url.rsplit("/", 1)[0] or "/"  # "/index.json": the root, not "no base"


def resolve_shard_url(base: str, url: str) -> str:
    """A shard's URL as a manifest names it, resolved against ``base`` (:func:`base_url_of`).
    ``base`` "": no manifest, the URL is the shard's own (a relative path stays relative to
    the working folder, never joined to the root of the file system)."""
    if not base or "://" in url or url.startswith("/"):
        return url
    return f"{base.rstrip('/')}/{url}"


def load_manifest(
    source: str, storage_options: dict[str, Any] | None = None
) -> tuple[Manifest, str]:
    """Read and validate the manifest of ``source``; return it and its base URL."""
    from wdstool.base.s3 import read_object

    url = manifest_url_for(source)
    try:
        data = read_object(url, storage_options)
    except FileNotFoundError:
        raise ManifestNotFound(
            f"{url}: no manifest found (pack with `wdstool pack`, or pass a brace pattern "
            "of shard URLs)"
        ) from None
    return parse_manifest(data, url), base_url_of(url)


def recorded_offsets(
    manifest: Manifest, base: str, storage_options: dict[str, Any] | None = None
) -> list[tuple[int, ...] | None]:
    """Each shard's offsets as ``manifest``'s offsets file says them (None for each where it
    has none; ``base``: the manifest's folder); a file missing or of the wrong size is an
    error naming it."""
    from wdstool.base.s3 import read_object

    of = manifest.sample_offsets
    if of is None:
        return [None] * len(manifest.shards)
    url = resolve_shard_url(base, of.name)
    try:
        data = read_object(url, storage_options)
    except FileNotFoundError:
        raise ShardError(f"{url}: the manifest names this offsets file; it is missing") from None
    if len(data) != of.span(of.samples, 0)[0]:
        raise ShardError(
            f"{url}: {len(data)} bytes, the manifest says {of.span(of.samples, 0)[0]} "
            f"({of.samples} samples of {of.dtype})"
        )
    return read_all(data, of, [s.nsamples for s in manifest.shards])
