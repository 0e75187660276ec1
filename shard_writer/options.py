"""What ``pack`` is asked to do (:class:`PackOptions`) and what it reports (:class:`PackSummary`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shard_writer.layout import LayoutOptions
from shard_writer.listing import ListingColumns
from shard_writer.probe import EncodeOptions
from wdstool.base.errors import ConfigError, OnError
from wdstool.format.restart import MIN_PIXELS, TARGET_WIDTH
from wdstool.format.restart import available as restart_available

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
ENGINES = ("local", "ray")
# the word index.json records for each on_error: "fail" is what writers called "raise" before
# the two sides shared one vocabulary, and recorded options feed the fingerprint, so a rerun or
# an append over a data set written then still finds it is the same data set
_RECORDED_ON_ERROR = {OnError.RAISE: "fail", OnError.SKIP: "skip"}


@dataclass(frozen=True, kw_only=True)
class WriteOptions:
    """What every command that writes a data set (pack, reshard, split) is asked to do: shard
    limits and names, the write-time shuffle, re-encoding, workers, and what to do with DEST."""

    prefix: str = "train"
    max_count: int = 10_000
    max_size: int = 256 * 1000**2
    shuffle: bool = True
    seed: int = 0
    workers: int | None = None
    on_error: OnError = OnError.SKIP
    max_side: int | None = None
    quality: int | None = None
    # rewrite large JPEGs with restart intervals (lossless) so the loaders decode only a crop's
    # part; off by default: a whole decode of such a file is ~5% slower (bench/restart_bench.py)
    restart_markers: bool = False
    overwrite: bool = False
    append: bool = False  # a new version of the data set in DEST (shards after its last one)
    sync: bool = True  # fsync shards before index.json (durability; not part of the output)
    engine: str = "local"  # "local" (process pool) or "ray"; never part of the output
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix) or "/" in self.prefix:
            raise ConfigError(f"prefix={self.prefix!r}: use letters, digits, '_', '-', '.'")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"workers={self.workers}: must be >= 1")
        if self.max_side is not None and self.max_side < 8:
            raise ConfigError(f"max_side={self.max_side}: must be >= 8 pixels")
        if self.quality is not None and not 1 <= self.quality <= 100:
            raise ConfigError(f"quality={self.quality}: must be within 1..100")
        if self.restart_markers and not restart_available():
            raise ConfigError(
                "restart_markers=True: this build has no JPEG transcoder (the C extension needs "
                "a C compiler and libjpeg headers: apt install libjpeg-dev, then reinstall)"
            )
        if self.engine not in ENGINES:
            raise ConfigError(f"engine={self.engine!r}: choose one of {', '.join(ENGINES)}")
        if self.append and self.overwrite:
            raise ConfigError(
                "append=True adds a version to the data set in DEST, overwrite=True replaces it: "
                "choose one"
            )
        try:
            object.__setattr__(self, "on_error", OnError(self.on_error))
        except ValueError:
            choices = ", ".join(repr(e.value) for e in OnError)  # as the loader's config says it
            raise ConfigError(f"on_error={self.on_error!r} is not one of {choices}") from None
        LayoutOptions(max_count=self.max_count, max_size=self.max_size)  # validates limits

    @property
    def layout(self) -> LayoutOptions:
        return LayoutOptions(
            max_count=self.max_count, max_size=self.max_size, shuffle=self.shuffle, seed=self.seed
        )

    @property
    def encode(self) -> EncodeOptions:
        return EncodeOptions(
            max_side=self.max_side, quality=self.quality, restart_markers=self.restart_markers
        )

    def _encoding(self) -> dict[str, Any]:
        """The recorded re-encoding options; restart markers only when asked, so that the
        fingerprint of every data set written without them stays what it was."""
        out: dict[str, Any] = {"max_side": self.max_side, "quality": self.quality}
        if self.restart_markers:
            out["restart_markers"] = {"target_width": TARGET_WIDTH, "min_pixels": MIN_PIXELS}
        return out

    def _limits(self) -> dict[str, Any]:
        """The recorded options every writer shares (in the order pack always recorded them:
        the fingerprint hashes this dict as it is)."""
        return {
            "prefix": self.prefix,
            "max_count": self.max_count,
            "max_size": self.max_size,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "on_error": _RECORDED_ON_ERROR[self.on_error],
        }


@dataclass(frozen=True, kw_only=True)
class PackOptions(WriteOptions):
    """What :func:`shard_writer.pack` is asked to do: every :class:`WriteOptions` setting, a
    full decode of every image (``verify_decode``), and which columns of a listing SRC hold
    the paths, labels, captions, a row's list of images (samples of several images) or
    (Hub-style parquet) the images themselves."""

    verify_decode: bool = False
    # a listing SRC's columns (None: "path", "label", "caption"); a listing's content, not these
    # names, is what the fingerprint covers, so they are not recorded
    path_column: str | None = None
    label_column: str | None = None
    caption_column: str | None = None
    # a listing of samples of several images: the column listing each row's images (None:
    # "images", when the listing has no path column)
    images_column: str | None = None
    # a listing of conversations: the column of the samples' keys (None: "id" where unique)
    key_column: str | None = None
    # a parquet SRC whose images are in a column (Hub style): that column (None: "image", when
    # the file has no path column)
    image_column: str | None = None
    # a Parquet SRC holding several splits: the one to pack (as SRC#SPLIT); its rows' keys,
    # not this name, are what the fingerprint covers
    split: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        ListingColumns(
            path=self.path_column,
            label=self.label_column,
            caption=self.caption_column,
            images=self.images_column,
            key=self.key_column,
        )  # validates names
        if self.image_column is not None and not self.image_column:
            raise ConfigError("image_column='': the column name is empty")
        if self.split is not None and (not self.split or "/" in self.split or "#" in self.split):
            raise ConfigError(f"split={self.split!r}: a split's name (train, test, ...)")

    @property
    def columns(self) -> ListingColumns:
        return ListingColumns(
            path=self.path_column,
            label=self.label_column,
            caption=self.caption_column,
            images=self.images_column,
            key=self.key_column,
        )

    @property
    def encode(self) -> EncodeOptions:
        return EncodeOptions(
            verify_decode=self.verify_decode,
            max_side=self.max_side,
            quality=self.quality,
            restart_markers=self.restart_markers,
        )

    def recorded(self) -> dict[str, Any]:
        """The options that determine the output bytes (recorded in the manifest)."""
        return {
            **self._limits(),
            "verify_decode": self.verify_decode,
            **self._encoding(),
        }


@dataclass(kw_only=True)
class PackSummary:
    """What a write did (pack, reshard, each split): shards, samples and bytes written or
    reused, the inputs skipped (with why), time and throughput; ``to_json()`` is ``--json``'s
    document."""

    dest: str
    shards: int
    samples: int
    total_bytes: int
    source_bytes: int
    classes: int
    skipped: list[dict[str, str]]
    reused_shards: int
    written_shards: int
    seconds: float
    workers: int
    up_to_date: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def images_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.source_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "dest": self.dest,
            "shards": self.shards,
            "samples": self.samples,
            "total_bytes": self.total_bytes,
            "source_bytes": self.source_bytes,
            "classes": self.classes,
            "skipped": self.skipped,
            "reused_shards": self.reused_shards,
            "written_shards": self.written_shards,
            "seconds": round(self.seconds, 3),
            "images_per_s": round(self.images_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 1),
            "workers": self.workers,
            "up_to_date": self.up_to_date,
            "engine": "local",
            **self.extra,
        }


ProgressFn = Callable[[int, int, int], None]  # (samples, source bytes, shards) increments


@dataclass(frozen=True, kw_only=True)
class ReshardOptions(WriteOptions):
    """``reshard`` (and ``split``): pack's write options, and which samples to carry.

    ``on_error`` defaults to raise here: a source shard that cannot be read loses many samples
    at once, which should not pass unnoticed (skip lists it and keeps what was read before)."""

    on_error: OnError = OnError.RAISE
    keys: str | None = None  # a file (or URL) with one key a line: carry only these
    exclude_keys: str | None = None  # ... carry all but these
    dedupe: bool = False
    rename_collisions: bool = False
    # SRCs that carry different members (.cls in one only): refused unless this (not recorded:
    # it decides whether to write, not what)
    allow_mixed_members: bool = False

    def recorded(self, key_lists: dict[str, str | None]) -> dict[str, Any]:
        """The options that determine the output bytes; ``key_lists``: the sha256 of each key
        list given (the lists themselves can be long)."""
        return {
            "command": "reshard",
            **self._limits(),
            **self._encoding(),
            "dedupe": self.dedupe,
            "rename_collisions": self.rename_collisions,
            **key_lists,
        }
