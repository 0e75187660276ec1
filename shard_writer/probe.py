"""Probe every candidate image or video before the layout is planned.

The layout must know which inputs are good and how many bytes each sample stores, so probing
comes first, in parallel: by default only the image header and the last few KB (the end marker)
are read, not the whole file; ``--verify-decode`` decodes fully; re-encoding encodes once to
learn the size (PIL's encoder is deterministic; the shard writer encodes again). A video (told
apart by its leading bytes, never its name) is read whole and probed with
:func:`wdstool.format.video.probe_video` (its streams, frames and keyframes; its first frame
decoded); it is stored as it is, whatever the re-encoding options (they apply to images).
Failures are known before any shard is written, so ``--on-error fail`` publishes nothing and no shard ends
up emptier than the layout planned.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import NamedTuple

from shard_writer import sources
from shard_writer.image import BadImage, PreparedImage, prepare_image
from shard_writer.scan import (
    VIDEO_FILE_EXTENSIONS,
    Scan,
    Skipped,
    SourceFile,
    describe_stat_error,
    locate,
    printable,
)
from wdstool.base.errors import ConfigError, InputError
from wdstool.base.urls import is_remote
from wdstool.format.video import BadVideo, probe_video, video_kind

_CHUNK = 128
_TAIL = 4096


@dataclass(frozen=True, kw_only=True)
class EncodeOptions:
    """Everything that changes the bytes of a sample (of an image: videos keep theirs)."""

    verify_decode: bool = False
    max_side: int | None = None
    quality: int | None = None
    restart_markers: bool = False

    @property
    def reencode(self) -> bool:
        """Whether the stored bytes are encoded anew (their size is learned by encoding)."""
        return self.max_side is not None or self.quality is not None

    @property
    def rewrites(self) -> bool:
        """Whether the stored bytes may differ from the source's. Restart markers alone never
        make an image larger (``add_restarts``), so the probe plans with the source's size
        and only the writer rewrites it, once."""
        return self.reencode or self.restart_markers

    def apply(self, data: bytes, *, verify_decode: bool = False) -> PreparedImage:
        """The image to store for ``data`` (BadImage with the reason when it cannot be)."""
        return prepare_image(
            data,
            verify_decode=verify_decode,
            max_side=self.max_side,
            quality=self.quality,
            restart_markers=self.restart_markers,
        )


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """What the shard writer needs to know about a good input (an image, or a video: then
    ``ext`` and ``fmt`` are its container's member extension and ``video`` its facts)."""

    ext: str
    width: int
    height: int
    fmt: str
    payload_size: int
    source_size: int = -1  # bytes of the source file (learned here when the scan did not stat it)
    # a video's facts, KEY.json's "video": VideoInfo.to_json() as canonical JSON; "" for an image
    video: str = ""


def info_of(img: PreparedImage, source_size: int) -> ImageInfo:
    """What the layout needs of an image prepared at probe time (what restart_markers did is
    counted by the writer, which rewrites it)."""
    return ImageInfo(img.ext, img.width, img.height, img.fmt, len(img.payload), source_size)


def read_source(url: str, expected_size: int | None, storage_options: dict | None = None) -> bytes:
    """Read a whole source file (or object); raise BadImage with a user-facing reason."""
    if is_remote(url):
        try:
            data = sources.read_range(url, storage_options)
        except sources.Missing:
            raise BadImage("vanished during pack") from None
    else:
        try:
            with open(url, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise BadImage("vanished during pack (or broken symlink)") from None
        except OSError as exc:
            raise BadImage(f"unreadable: {exc.strerror or exc}") from None
    if expected_size is not None and len(data) != expected_size:
        raise BadImage(f"changed during pack: {len(data)} bytes, {expected_size} when scanned")
    return data


def source_size(url: str, storage_options: dict | None = None) -> int:
    """The size of a source file nobody stat'ed yet (a listing's); BadImage when it is missing."""
    if is_remote(url):
        try:
            return sources.object_size(url, storage_options)
        except sources.Missing:
            raise BadImage("missing file") from None
    try:
        st = os.stat(url)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not os.path.islink(url):
            raise BadImage("missing file") from None
        raise BadImage(describe_stat_error(url, exc)) from None
    if not stat.S_ISREG(st.st_mode):
        raise BadImage("not a file" + (" (a directory)" if stat.S_ISDIR(st.st_mode) else ""))
    return st.st_size


def _ends_well(head: bytes, tail: bytes) -> bool:
    return b"\xff\xd9" in tail or b"IEND" in tail or not head.startswith((b"\xff\xd8", b"\x89PNG"))


def _head_and_tail(url: str, size: int, storage_options: dict | None = None) -> bytes:
    """Enough of the file to parse the header and see the end marker, without reading it all."""
    if size <= 2 * 65536:
        return read_source(url, None, storage_options)
    if is_remote(url):
        try:
            head = sources.read_range(url, storage_options, 0, 65536)
            tail = sources.read_range(url, storage_options, size - _TAIL, size)
        except sources.Missing:
            raise BadImage("vanished during pack") from None
    else:
        try:
            with open(url, "rb") as f:
                head = f.read(65536)
                f.seek(size - _TAIL)
                tail = f.read()
        except FileNotFoundError:
            raise BadImage("vanished during pack (or broken symlink)") from None
        except OSError as exc:
            raise BadImage(f"unreadable: {exc.strerror or exc}") from None
    if _ends_well(head, tail):
        return head + tail
    return read_source(url, None, storage_options)  # rare: a trailer after the end marker


def video_info(data: bytes, where: str) -> ImageInfo:
    """What the layout needs of a whole source video ``data`` (``where``: its path, for the
    error when PyAV is missing): its facts from ``probe_video`` (its first frame decoded);
    BadImage with BadVideo's reason when it is not a video pack can store."""
    try:
        facts = probe_video(data)
    except BadVideo as exc:
        raise BadImage(str(exc)) from None
    except ImportError:
        raise ConfigError(
            f"{where}: a video; probing videos needs PyAV: pip install -e '.[video]'"
        ) from None
    ext = video_kind(data) or ""
    canonical = json.dumps(facts.to_json(), sort_keys=True, separators=(",", ":"))
    return ImageInfo(ext, facts.width, facts.height, ext, len(data), len(data), canonical)


def _named_video(f: SourceFile, exc: BadImage) -> BadImage:
    """The reason for a file named as a video whose bytes are no image either: what
    ``probe_video`` says of an unrecognised container (the bytes decided; the name only picks
    the words)."""
    if f.relpath.lower().endswith(VIDEO_FILE_EXTENSIONS) and str(exc).startswith("not an image"):
        return BadImage("not a video (unrecognised container)")
    return exc


def probe_one(
    root: str, f: SourceFile, encode: EncodeOptions, storage_options: dict | None = None
) -> ImageInfo:
    """Check one input, an image or a video (from its bytes); raise BadImage with the reason."""
    url = locate(root, f)
    size = f.size if f.size >= 0 else source_size(url, storage_options)
    if encode.verify_decode or encode.reencode:
        data = read_source(url, size, storage_options)
        if video_kind(data) is not None:
            return video_info(data, url)
        try:
            img = encode.apply(data, verify_decode=encode.verify_decode)
        except BadImage as exc:
            raise _named_video(f, exc) from None
        return info_of(img, size)
    if size == 0:
        raise BadImage("empty file")
    sample = _head_and_tail(url, size, storage_options)
    if video_kind(sample) is not None:  # read whole: its index may lie anywhere in the file
        whole = sample if len(sample) == size else read_source(url, size, storage_options)
        return video_info(whole, url)
    try:
        img = prepare_image(sample)
    except BadImage as exc:
        raise _named_video(f, exc) from None
    return ImageInfo(img.ext, img.width, img.height, img.fmt, size, size)


def _probe_chunk(
    root: str, files: list[SourceFile], encode: EncodeOptions, storage_options: dict | None = None
) -> list[ImageInfo | str]:
    out: list[ImageInfo | str] = []
    for f in files:
        try:
            out.append(probe_one(root, f, encode, storage_options))
        except BadImage as exc:
            out.append(str(exc))
    return out


def probe_files(
    scan: Scan,
    encode: EncodeOptions,
    *,
    fail: bool,
    progress: Callable[[int], None] | None = None,
    pool: Executor | None = None,
) -> tuple[list[SourceFile], list[ImageInfo], list[Skipped]]:
    """Return (good files, their infos, skipped inputs), good files in scan order; probing
    runs in ``pool`` when given (chunks of files), else inline. A good file whose size the scan
    did not know (a listing's) comes back with the size the probe found."""
    files = list(scan.files)
    chunks = [files[i : i + _CHUNK] for i in range(0, len(files), _CHUNK)]
    results: list[ImageInfo | str] = []
    if pool is None or len(chunks) <= 1:
        parts: Iterable[list[ImageInfo | str]] = (
            _probe_chunk(scan.root, chunk, encode, scan.storage_options) for chunk in chunks
        )
    else:
        n = len(chunks)
        parts = pool.map(
            _probe_chunk, [scan.root] * n, chunks, [encode] * n, [scan.storage_options] * n
        )
    for chunk, part in zip(chunks, parts, strict=True):
        results.extend(part)
        if progress:
            progress(len(chunk))
    return sort_probed(scan, files, results, fail)


def sort_probed(
    scan: Scan, files: list[SourceFile], results: list[ImageInfo | str], fail: bool
) -> tuple[list[SourceFile], list[ImageInfo], list[Skipped]]:
    """(good files, their infos, skipped inputs) from each file's probe result (its ImageInfo,
    or why it is bad): the first bad one raises InputError when ``fail``."""
    good, infos, skipped = [], [], []
    for f, res in zip(files, results, strict=True):
        if isinstance(res, ImageInfo):
            good.append(f if f.size >= 0 else replace(f, size=res.source_size))
            infos.append(res)
        elif fail:
            raise InputError(scan.describe(f, res))
        else:
            skipped.append(Skipped(printable(f.relpath), res, f.row))
    return good, infos, skipped


class Payload(NamedTuple):
    """What the writer stores for one image: ``data``, the source bytes read (``nread``), and
    what ``restart_markers`` did with it (PreparedImage.restarts: "" when not asked)."""

    data: bytes
    nread: int
    restarts: str = ""


def rewritten(data: bytes, info: ImageInfo, encode: EncodeOptions) -> Payload:
    """The bytes to store for ``data``, a probed input's, at write time: re-encoded (the size
    the probe learned) and/or with restart markers (at most the planned size); a video's as
    they are."""
    if info.video or not encode.rewrites:
        return Payload(data, len(data))
    img = encode.apply(data)
    planned = info.payload_size
    if len(img.payload) != planned and (encode.reencode or len(img.payload) > planned):
        raise BadImage("re-encoding gave a different size than when probed (changed during pack?)")
    return Payload(img.payload, len(data), img.restarts)


def payload_for(
    root: str,
    f: SourceFile,
    info: ImageInfo,
    encode: EncodeOptions,
    storage_options: dict | None = None,
) -> Payload:
    """What to store for a probed input, read from its source at write time."""
    return rewritten(read_source(locate(root, f), f.size, storage_options), info, encode)
