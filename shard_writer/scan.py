"""Walk an ImageFolder root exactly as torchvision does; the records every source of samples
(this walk, or a listing file: :mod:`shard_writer.listing`) hands to probe, layout and write.

``torchvision.datasets.ImageFolder`` sorts class folders by name, gives them indices in that
order, walks each class folder with ``sorted(os.walk(..., followlinks=True))`` and keeps the files
whose lower-cased name ends with one of ``IMG_EXTENSIONS``. We reproduce that order so labels
match, and record (instead of raising) what torchvision would choke on: empty class folders,
files that cannot be stat'ed (broken symlinks, permissions). Videos (``VIDEO_FILE_EXTENSIONS``:
``class/clip.mp4``, ...) are kept too, in the same order, beside images or alone; the probe
tells an image from a video by its bytes, never by this name.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from shard_writer import sources
from wdstool.base.errors import InputError
from wdstool.base.urls import is_remote, local_path
from wdstool.format.video import VIDEO_ORDER

# torchvision.datasets.folder.IMG_EXTENSIONS
IMG_EXTENSIONS: tuple[str, ...] = (
    ".jpg",
    ".jpeg",
    ".png",
    ".ppm",
    ".bmp",
    ".pgm",
    ".tif",
    ".tiff",
    ".webp",
)
# the video containers pack stores (wdstool.format.video), and everything the walk keeps
VIDEO_FILE_EXTENSIONS: tuple[str, ...] = tuple(f".{ext}" for ext in VIDEO_ORDER)
MEDIA_EXTENSIONS: tuple[str, ...] = IMG_EXTENSIONS + VIDEO_FILE_EXTENSIONS


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One candidate image or video: its position in source order, its path, label and metadata.

    From an ImageFolder tree: ``relpath`` is relative to the root, ``size`` comes from the walk,
    the other fields keep their defaults. From a listing: ``index`` is the row's position,
    ``relpath`` the path as the listing gives it, ``url`` where it is read from, ``size`` -1 until
    the probe learns it, ``row`` the row number shown in messages (1-based), ``class_idx`` -1
    without a label, ``caption`` the text for ``KEY.txt`` (``""`` for a row without one, ``None``
    when the listing has no caption column: then no ``KEY.txt``) and ``extra`` the row's other columns as
    canonical JSON (an object), merged into ``KEY.json``. From Hub Parquet: ``key`` is the row's
    key (:func:`wdstool.format.parquet.row_key`, the loader's), which the layout keeps.
    """

    index: int
    relpath: str
    class_idx: int
    size: int
    url: str = ""
    row: int = 0
    caption: str | None = None
    extra: str = ""
    key: str = ""  # the sample's key where the source gives it (a Hub Parquet row's), else ""


def locate(root: str, f: SourceFile) -> str:
    """Where ``f`` is read from: a local path or a URL."""
    if f.url:
        return f.url
    return sources.url_of(root, f.relpath) if is_remote(root) else os.path.join(root, f.relpath)


def describe(root: str, listing: str | None, f: SourceFile, reason: str) -> str:
    """A one-line message about a bad input: its path (and listing row), then ``reason``."""
    if f.row:
        return f"{listing or 'listing'}: row {f.row}: {printable(f.url or f.relpath)}: {reason}"
    return f"{os.path.join(root, printable(f.relpath))}: {reason}"


@dataclass(frozen=True, slots=True)
class Skipped:
    """An input left out of the dataset, and why (``row``: its listing row, 0 for a tree)."""

    path: str
    reason: str
    row: int = 0

    def to_json(self) -> dict[str, str | int]:
        if self.row:
            return {"row": self.row, "path": self.path, "reason": self.reason}
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class Scan:
    """The result of reading SRC: classes in label order, files in source order (ImageFolder
    order, or a listing's row order). A listing's ``root`` is its folder."""

    root: str
    classes: tuple[str, ...]
    files: tuple[SourceFile, ...]
    problems: tuple[Skipped, ...]
    storage_options: dict | None = None  # for a SRC on an object store
    listing: str | None = None  # the listing file SRC names, if it is one

    @property
    def name(self) -> str:
        """SRC as messages name it."""
        return self.listing or self.root

    def describe(self, f: SourceFile, reason: str) -> str:
        return describe(self.root, self.listing, f, reason)

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.classes)}


def printable(path: str) -> str:
    """A path as valid UTF-8 text: undecodable bytes shown as backslash escapes."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def describe_stat_error(path: str, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop: cannot stat"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return "broken symlink"
    return f"cannot stat: {exc.strerror or exc}"


def scan_imagefolder(root: str | os.PathLike[str], storage_options: dict | None = None) -> Scan:
    """Walk ``root`` (``root/<class>/**/<image or video>``) and return every candidate file.

    ``root`` may be a URL (``s3://bucket/prefix``): it is then listed in one recursive listing
    and put in the same order. Raises InputError when root is missing, is not a directory, or
    has no class folder. Files are only stat'ed here; their content is checked when shards are
    written.
    """
    root = os.fspath(root)
    if is_remote(root):
        return _scan_remote(root.rstrip("/"), storage_options)
    root = local_path(root)
    if not os.path.exists(root):
        raise InputError(f"{root}: no such directory")
    if not os.path.isdir(root):
        raise InputError(
            f"{root}: not a directory (expected an ImageFolder root: SRC/<class>/<image>)"
        )
    try:
        classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    except OSError as exc:
        raise InputError(f"{root}: cannot list directory: {exc.strerror or exc}") from exc
    if not classes:
        raise InputError(
            f"{root}: not an ImageFolder tree: no class folders found (expected SRC/<class>/<image>)"
        )

    files: list[SourceFile] = []
    problems: list[Skipped] = []
    for class_idx, name in enumerate(classes):
        class_dir = os.path.join(root, name)
        found = 0
        for dirpath, _dirs, fnames in sorted(os.walk(class_dir, followlinks=True)):
            for fname in sorted(fnames):
                if not fname.lower().endswith(MEDIA_EXTENSIONS):
                    continue
                path = os.path.join(dirpath, fname)
                rel = os.path.relpath(path, root)
                found += 1
                try:
                    st = os.stat(path)
                except OSError as exc:
                    problems.append(Skipped(printable(rel), describe_stat_error(path, exc)))
                    continue
                files.append(SourceFile(len(files), rel, class_idx, st.st_size))
        if found == 0:
            problems.append(
                Skipped(printable(name), "empty class folder: no file with an image extension")
            )
    return Scan(root=root, classes=tuple(classes), files=tuple(files), problems=tuple(problems))


def _scan_remote(root: str, storage_options: dict | None) -> Scan:
    classes, found, empty = sources.imagefolder_order(
        sources.list_tree(root, storage_options), MEDIA_EXTENSIONS
    )
    if not classes:
        raise InputError(
            f"{root}: not an ImageFolder tree: no class folders found (expected SRC/<class>/<image>)"
        )
    files = tuple(SourceFile(i, rel, c, size) for i, (c, rel, size) in enumerate(found))
    problems = tuple(
        Skipped(name, "empty class folder: no file with an image extension") for name in empty
    )
    return Scan(
        root=root,
        classes=tuple(classes),
        files=files,
        problems=problems,
        storage_options=storage_options,
    )
