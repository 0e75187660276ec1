"""Which reader reads a shard: container formats behind one small protocol, chosen by URL.

The loader's stream (:mod:`loaders.read`), the header-only count of a source without a manifest
(:func:`count_samples`) and verify's walk over a data set's samples get their reader here,
once per shard: ``format_for(url).read(fileobj, url, keep=...)``. Tar (WebDataset) is the one
format built in, and the default for a URL that no registered suffix ends; another container
format is a class with a ``name``, its URL ``suffixes`` and ``read`` (as MosaicML streaming's
``streaming.format`` registry holds its MDS, JSON and CSV readers), and one
:func:`register_format` call: the stream, the plan and the batches do not change.

A reader yields :class:`Sample` (a key and its members' bytes by extension); nothing is ever
unpickled. Member-level tools stay tar's own: header scans for reshard's joins and DALI's
index files, member safety for ``tar -x`` (:mod:`wdstool.format.tar_read`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, runtime_checkable
from urllib.parse import urlsplit

from wdstool.base.errors import ConfigError
from wdstool.format.tar_read import Sample, TarSampleReader

__all__ = [
    "TAR",
    "Sample",
    "SampleReader",
    "ShardFormat",
    "count_samples",
    "format_for",
    "register_format",
    "unregister_format",
]


@runtime_checkable
class SampleReader(Protocol):
    """The samples of one shard, read once, in order."""

    @property
    def offset(self) -> int:
        """Bytes of the shard behind the last sample yielded or skipped (named in the log line
        of a damaged shard: how far it was readable)."""
        ...

    def __iter__(self) -> Iterator[Sample]: ...

    def skip(self, n: int) -> None:
        """Pass over the next ``n`` samples, reading as little as the format allows; a
        ShardError naming the URL when the shard holds fewer."""
        ...


@runtime_checkable
class ShardFormat(Protocol):
    """A container format for shards: its ``name``, the URL ``suffixes`` it reads (``.tar``),
    and :meth:`read`. Instances are picklable (they travel inside readers to DataLoader
    workers) and hold no open resources."""

    name: str
    suffixes: tuple[str, ...]

    def read(
        self,
        fileobj: BinaryIO,
        url: str,
        *,
        keep: Callable[[str], bool] | None = None,
        lazy: Callable[[int, int], Any] | None = None,
        lazy_exts: frozenset[str] = frozenset(),
    ) -> SampleReader:
        """The samples of the shard ``fileobj`` (opened at byte 0 for sequential reading).
        ``keep(ext)`` says which members a sample needs (the others may be skipped unread); a
        format that stores a member's bytes contiguously may give ``lazy(offset, size)`` in
        their place for extensions in ``lazy_exts`` (a view of a memory-mapped local shard),
        or ignore ``lazy`` and give the bytes. A damaged shard is a ShardError naming
        ``url`` and where."""
        ...


@dataclass(frozen=True)
class TarFormat:
    """WebDataset tar shards: consecutive members sharing a key form a sample."""

    name: str = "tar"
    suffixes: tuple[str, ...] = (".tar",)

    def read(self, fileobj: BinaryIO, url: str, **options: Any) -> TarSampleReader:
        """:class:`TarSampleReader` over ``fileobj``, with ``ShardFormat.read``'s options."""
        return TarSampleReader(fileobj, url, **options)


TAR = TarFormat()
_FORMATS: dict[str, ShardFormat] = {TAR.name: TAR}


def register_format(fmt: ShardFormat) -> ShardFormat:
    """Read URLs ending in one of ``fmt.suffixes`` (case aside) with ``fmt``, from now on in
    this process and in the DataLoader workers it forks; register at import of the module that
    defines ``fmt`` where workers are spawned. Returns ``fmt``. A name or suffix another
    registered format has is a ConfigError (:func:`unregister_format` it first)."""
    if not isinstance(fmt, ShardFormat) or not fmt.name or not fmt.suffixes:
        raise ConfigError(f"{fmt!r}: a shard format needs a name, URL suffixes and read()")
    for other in _FORMATS.values():
        taken = {s.lower() for s in other.suffixes} & {s.lower() for s in fmt.suffixes}
        if other is not fmt and (other.name == fmt.name or taken):
            what = f"name {fmt.name!r}" if other.name == fmt.name else f"suffix {taken.pop()!r}"
            raise ConfigError(f"shard format {fmt.name!r}: {what} is {other.name!r}'s already")
    _FORMATS[fmt.name] = fmt
    return fmt


def unregister_format(name: str) -> None:
    """Forget the format ``name`` (tar stays: it is the default)."""
    if name != TAR.name:
        _FORMATS.pop(name, None)


def format_for(url: str) -> ShardFormat:
    """The format that reads ``url``: the registered one whose suffix ends the URL's path (a
    query string aside), else tar, as every shard was read before formats were registered."""
    path = (urlsplit(url).path if "://" in url else url).lower()
    for fmt in _FORMATS.values():
        if fmt is not TAR and path.endswith(tuple(s.lower() for s in fmt.suffixes)):
            return fmt
    return TAR


def count_samples(fileobj: BinaryIO, url: str) -> int:
    """Number of samples in a shard, reading as little as its format allows (tar: headers)."""
    return sum(1 for _ in format_for(url).read(fileobj, url, keep=lambda ext: False))
