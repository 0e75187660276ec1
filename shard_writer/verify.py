"""``inspect`` and ``verify``: read a packed dataset back and check it against its manifest.

verify also reports every member that would be unsafe to extract with ``tar -x`` (absolute or
``..`` names, links, devices, FIFOs, non-UTF-8 names; see :mod:`wdstool.format.tar_safety`):
all of them, in every shard, then fails unless they are allowed. Any other problem (size, sha256,
counts, layout, a corrupt tar) stops at the first bad shard, as a one-line error naming it.
Samples whose member sets differ (other tools' shards: some samples without ``.txt``) are a
warning naming the first one, since readers that take their columns from the first samples
(Hugging Face ``datasets``) drop, or fail on, members the first samples lack.

A sample's media is its one image or video member (``KEY.mp4``, ``KEY.webm``, ...: the
extensions of :mod:`wdstool.format.video`); a video member's bytes must be a video container,
and ``decode`` probes it as pack did (its streams and frames, its first frame decoded). A
sample of several images (``KEY.0.jpg``, ``KEY.1.png``, ...) is checked against its ``.json``
lists and the manifest's facts by :mod:`shard_writer.verify_interleaved`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shard_writer.foreign_index import dataset_of
from shard_writer.verify_interleaved import check_interleaved, is_doc, member_set
from wdstool.base.errors import ConfigError, ShardError, UnsafeMembersError, WdsToolError
from wdstool.base.remote import open_shard
from wdstool.format.images import IMAGE_EXTENSIONS
from wdstool.format.indexes import split_fragment
from wdstool.format.interleaved import per_sample
from wdstool.format.manifest import (
    Manifest,
    manifest_url_for,
    recorded_offsets,
    resolve_shard_url,
)
from wdstool.format.sample_offsets import OFFSETS_NAME
from wdstool.format.shard_formats import TAR, format_for
from wdstool.format.shardlist import is_pattern
from wdstool.format.tar_read import ObservedTarSampleReader, TarMember
from wdstool.format.tar_safety import printable_name, unsafe_reasons
from wdstool.format.video import VIDEO_EXTENSIONS, BadVideo, probe_video, video_kind


class _HashingReader:
    """A read-only, non-seekable file wrapper that hashes and counts every byte read."""

    def __init__(self, f: Any, on_bytes: Callable[[int], object] | None) -> None:
        self._f = f
        self._on_bytes = on_bytes
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.digest.update(data)
        self.size += len(data)
        if self._on_bytes is not None and data:
            self._on_bytes(len(data))
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


@dataclass(frozen=True, slots=True)
class UnsafeMember:
    """A shard member that would be unsafe to extract; ``name`` is printable (escaped)."""

    url: str
    name: str
    offset: int
    reasons: tuple[str, ...]

    def line(self) -> str:
        return (
            f"{self.url}: member '{self.name}' at offset {self.offset} is unsafe to extract: "
            + ", ".join(self.reasons)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "member": self.name,
            "offset": self.offset,
            "problems": list(self.reasons),
        }


def _where(source: str) -> str:
    """What a data set's report names: its index (``index.json`` of a folder), or the source
    itself (a pattern, an index file)."""
    if is_pattern(source) or split_fragment(source)[0].endswith(".json"):
        return source
    return manifest_url_for(source)


def inspect_dataset(source: str, *, nkeys: int = 5, storage_options: dict | None = None) -> dict:
    """Summary of a dataset from its index (ours, wids', timm's; for other shards, counted
    from their headers), plus the first ``nkeys`` keys of the first shard. ``num_videos`` and
    ``video_seconds`` are what the index records (0 without videos); ``num_videos`` is None when
    it records none but the first samples hold videos (a data set not written by pack)."""
    manifest, base = dataset_of(source, storage_options)
    keys: list[str] = []
    videos_seen = False
    if nkeys and manifest.shards:
        url = resolve_shard_url(base, manifest.shards[0].url)
        with open_shard(url, storage_options) as f:
            for sample in format_for(url).read(f, url, keep=lambda ext: ext == "json"):
                keys.append(sample.key)
                videos_seen = videos_seen or b'"video"' in bytes(sample.parts.get("json", b""))
                if len(keys) >= nkeys:
                    break
    counts = manifest.shard_sizes
    info = manifest.to_json()
    info.pop("videos", None)
    docs = info.pop("interleaved", None)
    if docs is not None:  # samples of several images: the totals, not every sample's facts
        for entry in info["shardlist"]:
            entry.pop("interleaved", None)
        info["interleaved"] = {
            **docs,
            "images_per_sample": per_sample(manifest.facts),
        }
    unknown = videos_seen and not manifest.videos.count
    info.update(
        num_videos=None if unknown else manifest.videos.count,
        video_seconds=round(manifest.videos.seconds, 3),
        manifest=_where(source),
        shards=info.pop("shardlist"),
        min_samples=min(counts) if counts else 0,
        max_samples=max(counts) if counts else 0,
        sample_keys=keys,
    )
    return info


@dataclass
class MemberSets:
    """The member set (extensions) of a data set's first sample, and the first sample whose
    set differs from it."""

    first: tuple[str, ...] | None = None
    first_at: tuple[str, str] = ("", "")  # (shard URL, key)
    offender: dict[str, Any] | None = None

    def see(self, url: str, key: str, extensions: Any) -> None:
        exts = tuple(member_set(extensions))
        if self.first is None:
            self.first, self.first_at = exts, (url, key)
        elif self.offender is None and exts != self.first:
            self.offender = {"url": url, "key": key, "members": list(exts)}

    def to_json(self) -> dict[str, Any]:
        return {
            "consistent": self.offender is None,
            "members": list(self.first or ()),
            "first_offender": self.offender,
        }

    def warning(self) -> str | None:
        """One line naming the first sample whose members differ from the first sample's."""
        if self.offender is None or self.first is None:
            return None
        o = self.offender

        def shown(exts: Any) -> str:
            return " ".join(f".{e}" for e in exts) or "none"

        return (
            f"{o['url']}: sample {o['key']!r} has members {shown(o['members'])}, the first "
            f"sample ({self.first_at[1]!r} in {self.first_at[0]}) has {shown(self.first)}: "
            "samples carry different member sets, and readers that take their columns from "
            "the first samples (Hugging Face datasets) drop or fail on the others; give every "
            "sample the same members (wdstool pack writes an empty KEY.txt for a missing caption)"
        )


def _check_sample(sample: Any, url: str, nclasses: int, decode: bool) -> bool:
    """Check one sample; return whether it has a label (``.cls``). With class names in the
    manifest every sample needs one; without (a listing with integer labels or none), a label
    is optional, but must be an integer when present."""
    media = [e for e in sample.parts if e in IMAGE_EXTENSIONS or e in VIDEO_EXTENSIONS]
    if is_doc(sample.parts):
        media = []  # checked by check_interleaved (a conversation may have no image)
    elif len(media) != 1:
        raise ShardError(
            f"{url}: sample {sample.key!r} has {len(media)} image or video members, expected 1"
        )
    if media and media[0] in VIDEO_EXTENSIONS:
        _check_video(sample, media[0], url, decode)
    cls = sample.parts.get("cls")
    if cls is None:
        if nclasses:
            raise ShardError(f"{url}: sample {sample.key!r} has no .cls member")
    else:
        _check_label(sample.key, cls, url, nclasses)
    if decode and media and media[0] in IMAGE_EXTENSIONS:
        from wdstool.format.decode import decode_rgb

        try:
            decode_rgb(sample.parts[media[0]], media[0])
        except WdsToolError as exc:
            raise ShardError(f"{url}: sample {sample.key!r}: {exc.message}") from None
    return cls is not None


def _check_video(sample: Any, ext: str, url: str, decode: bool) -> None:
    """A video member is a video container; with ``decode``, one pack would store."""
    data = sample.parts[ext]
    if video_kind(data) is None:
        raise ShardError(
            f"{url}: sample {sample.key!r}: .{ext} member is not a video (unrecognised container)"
        )
    if not decode:
        return
    try:
        probe_video(data)
    except BadVideo as exc:
        raise ShardError(f"{url}: sample {sample.key!r}: .{ext} member: {exc}") from None
    except ImportError:
        raise ConfigError(
            f"{url}: holds videos; decoding them needs PyAV: pip install -e '.[video]'"
        ) from None


def _check_label(key: str, cls: bytes, url: str, nclasses: int) -> None:
    try:
        label = int(cls.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ShardError(f"{url}: sample {key!r} has a non-integer label {cls[:20]!r}") from None
    if nclasses and not 0 <= label < nclasses:
        raise ShardError(f"{url}: sample {key!r} label {label} outside 0..{nclasses - 1}")


def verify_shard(
    manifest: Manifest,
    index: int,
    base: str,
    *,
    decode: bool = False,
    storage_options: dict | None = None,
    on_bytes: Callable[[int], object] | None = None,
    on_unsafe: Callable[[UnsafeMember], object] | None = None,
    member_sets: MemberSets | None = None,
    totals: list[int] | None = None,
    offsets: tuple[int, ...] | None = None,
) -> list[UnsafeMember]:
    """Check one shard; raise ShardError at its first problem, except members unsafe to
    extract: those are returned (and passed to ``on_unsafe`` as they are found). Each sample's
    member set goes to ``member_sets``; its samples and bytes are added to ``totals``. A count
    or size the index does not give (-1) is not checked. ``totals``: [samples, bytes, videos,
    images of samples of several images]. ``offsets``: where the manifest's offsets file says
    each sample starts (None: it does not say)."""
    entry = manifest.shards[index]
    url = resolve_shard_url(base, entry.url)
    try:
        f = open_shard(url, storage_options)
        f.peek(1)  # remote shards open lazily: fail here, with this message, when missing
    except ShardError as exc:
        if "not found" not in exc.message or entry.nsamples < 0:  # < 0: no index lists it
            raise
        raise ShardError(f"{url}: shard listed in the manifest is missing") from None
    with f:
        reader = _HashingReader(f, on_bytes)
        seen: set[str] = set()
        labelled: set[bool] = set()
        n = videos = images = 0
        facts = manifest.facts[index] if manifest.facts else None
        sizes = facts.sample_sizes() if facts is not None else None
        unsafe: list[UnsafeMember] = []

        def check_member(m: TarMember) -> None:
            reasons = unsafe_reasons(m.name, m.kind)
            if reasons:
                problem = UnsafeMember(url, printable_name(m.name), m.offset, reasons)
                unsafe.append(problem)
                if on_unsafe is not None:
                    on_unsafe(problem)

        fmt = format_for(url)  # member safety (for tar -x) is a tar question
        samples = (
            ObservedTarSampleReader(reader, url, on_member=check_member)
            if fmt is TAR
            else fmt.read(reader, url)
        )
        for sample in samples:
            if sample.key in seen:
                raise ShardError(f"{url}: duplicate key {sample.key!r}")
            seen.add(sample.key)
            labelled.add(_check_sample(sample, url, len(manifest.classes), decode))
            videos += any(e in VIDEO_EXTENSIONS for e in sample.parts)
            if sizes is not None and n >= len(sizes):
                raise ShardError(f"{url}: more samples than the manifest's facts describe")
            if sizes is not None or is_doc(sample.parts):
                images += check_interleaved(
                    sample,
                    url,
                    decode,
                    None if sizes is None else sizes[n],
                    None if facts is None else facts.chars[n],
                )
            if member_sets is not None:
                member_sets.see(url, sample.key, sample.parts)
            if offsets is not None and (n >= len(offsets) or offsets[n] != sample.offset):
                said = offsets[n] if n < len(offsets) else "nothing"
                raise ShardError(
                    f"{url}: sample {sample.key!r} starts at byte {sample.offset}, "
                    f"{OFFSETS_NAME} says {said} (re-pack, or remove the file and "
                    "'sample_offsets' from the manifest)"
                )
            if len(labelled) > 1:
                raise ShardError(
                    f"{url}: sample {sample.key!r}: some samples have a .cls, some not"
                )
            n += 1
        reader.drain()
    if entry.filesize >= 0 and reader.size != entry.filesize:
        raise ShardError(f"{url}: size {reader.size} bytes, manifest says {entry.filesize}")
    if entry.sha256 and reader.digest.hexdigest() != entry.sha256:
        raise ShardError(f"{url}: sha256 mismatch (content changed or corrupt)")
    if entry.nsamples >= 0 and n != entry.nsamples:
        raise ShardError(f"{url}: {n} samples, manifest says {entry.nsamples}")
    if totals is not None:
        totals[0] += n
        totals[1] += reader.size
        totals[2] += videos
        if len(totals) > 3:
            totals[3] += images
    return unsafe


def verify_dataset(
    source: str,
    *,
    decode: bool = False,
    allow_unsafe_names: bool = False,
    storage_options: dict | None = None,
    on_bytes: Callable[[int], object] | None = None,
    on_unsafe: Callable[[UnsafeMember], object] | None = None,
) -> dict:
    """Check every shard; raise ShardError naming the first bad one. Returns a short report,
    with ``warnings`` (one line each: samples whose member sets differ).

    Members unsafe to extract are all collected (``on_unsafe`` sees each as it is found, the
    report lists them); then, unless ``allow_unsafe_names``, UnsafeMembersError (a ShardError
    carrying the report) says how many there are, in how many shards.
    """
    manifest, base = dataset_of(source, storage_options, count=False)
    unsafe: list[UnsafeMember] = []
    member_sets = MemberSets()
    totals = [0, 0, 0, 0]
    offsets = recorded_offsets(manifest, base, storage_options)
    for i in range(len(manifest.shards)):
        unsafe += verify_shard(
            manifest,
            i,
            base,
            decode=decode,
            storage_options=storage_options,
            on_bytes=on_bytes,
            on_unsafe=on_unsafe,
            member_sets=member_sets,
            totals=totals,
            offsets=offsets[i],
        )
    warning = member_sets.warning()
    report = {
        "manifest": _where(source),
        "num_shards": len(manifest.shards),
        "num_samples": totals[0],
        "num_videos": totals[2],
        "num_images": totals[3],
        "total_bytes": totals[1],
        "decoded": decode,
        "unsafe_members": [p.to_json() for p in unsafe],
        "allow_unsafe_names": allow_unsafe_names,
        "member_sets": member_sets.to_json(),
        "warnings": [warning] if warning else [],
        "ok": allow_unsafe_names or not unsafe,
    }
    if unsafe and not allow_unsafe_names:
        shards = len({p.url for p in unsafe})
        raise UnsafeMembersError(
            f"{report['manifest']}: {len(unsafe)} member(s) in {shards} of "
            f"{len(manifest.shards)} shard(s) are unsafe to extract with tar -x (absolute or "
            "'..' names, links, devices, FIFOs or non-UTF-8 names); re-pack, or accept them "
            "with allow_unsafe_names=True",
            report,
        )
    return report
