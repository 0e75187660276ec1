"""Where every sample of a data set starts, as one array beside its manifest.

A reader whose share of an epoch starts inside a shard needs the byte offset of its first
sample. On a local disk the headers before it are read in microseconds; on S3 or a web server
each header costs a request (20-50 ms to the first byte on S3), so a shard is not walked there.
``pack``, ``reshard``, ``split`` and ``--append`` know each sample's offset (they wrote the tar)
and record every one in ``index.offsets.npy`` beside ``index.json``:

- one flat ``.npy`` array of all samples' offsets, shard after shard in manifest order (shard
  ``i``'s at ``[sum(nsamples[:i]), sum(nsamples[:i+1]))``), ``uint32`` while every shard is
  under 4 GiB (``uint64`` past it): 4 bytes a sample, 8 KB for 2,000 samples, 4 GB for 10^9,
  of which a reader fetches only the shard it splits (one ranged read, ``nsamples * 4`` bytes);
- a shard whose offsets are not known (an append onto a data set packed before offsets were
  recorded) is filled with the type's largest value, :data:`UNKNOWN`;
- ``index.json`` names the file with its element type, where the array's data begins, how
  many samples it holds and a digest of the shards it describes (``"sample_offsets"``:
  :class:`OffsetsFile`), and is written after it, so a manifest never names offsets of another
  version (a manifest written without offsets names none, and a file left beside it is not
  read; one whose shards were rewritten since, by hand or another tool, no longer matches the
  digest, and its offsets are not used).

A shard's offsets are checked when read (first 0, increasing, inside the shard); the tar reader
then checks the header it lands on.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wdstool.base.errors import ShardError

OFFSETS_NAME = "index.offsets.npy"
_TYPES = {"<u4": np.uint32, "<u8": np.uint64}


@dataclass(frozen=True, slots=True)
class OffsetsFile:
    """What a manifest says of its offsets file: ``name`` (relative to the manifest), element
    type (``"<u4"`` or ``"<u8"``), where the array's data begins (``data_offset``: the ``.npy``
    header's length) and how many samples it holds."""

    name: str
    dtype: str
    data_offset: int
    samples: int
    shards: str = ""  # :func:`shards_digest` of the shards it describes

    @property
    def itemsize(self) -> int:
        return int(self.dtype[-1])

    @property
    def unknown(self) -> int:
        """The value that fills a shard whose offsets are not known."""
        return int(np.iinfo(_TYPES[self.dtype]).max)

    def span(self, first: int, count: int) -> tuple[int, int]:
        """Bytes ``[start, end)`` of the file holding samples ``first .. first + count``."""
        start = self.data_offset + first * self.itemsize
        return start, start + count * self.itemsize

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "data_offset": self.data_offset,
            "samples": self.samples,
            "shards": self.shards,
        }

    @classmethod
    def from_json(
        cls, raw: Any, samples: int, where: str, shards: str | None = None
    ) -> OffsetsFile | None:
        """What a manifest of ``samples`` samples says of its offsets file; None where it
        describes other shards (a manifest whose shards were rewritten or counted anew since,
        by hand or by another tool: its offsets are not used). ``shards``: the manifest's
        :func:`shards_digest` (None: not checked)."""
        ok = (
            isinstance(raw, dict)
            and type(raw.get("name")) is str
            and raw["name"]
            and raw.get("dtype") in _TYPES
            and type(raw.get("data_offset")) is int
            and raw["data_offset"] >= 0
            and type(raw.get("samples")) is int
        )
        if not ok:
            raise ShardError(
                f"{where}: malformed manifest: 'sample_offsets' must be "
                '{"name", "dtype": "<u4"|"<u8", "data_offset", "samples"}'
            )
        if raw["samples"] != samples or (shards is not None and raw.get("shards") != shards):
            return None
        return cls(raw["name"], raw["dtype"], raw["data_offset"], raw["samples"], shards or "")


def shards_digest(shards: Iterable[Sequence[Any]]) -> str:
    """What an offsets file describes: a digest of every shard's URL, count, size and sha256
    (a manifest's ``ShardEntry`` rows), so that offsets are never read for a shard rewritten
    since they were recorded."""
    h = hashlib.sha256()
    for url, nsamples, filesize, sha256, *_ in shards:
        h.update(f"{url}\0{nsamples}\0{filesize}\0{sha256}\n".encode())
    return h.hexdigest()[:32]


def offsets_bytes(
    per_shard: Sequence[Sequence[int] | None],
    filesizes: Sequence[int],
    nsamples: Sequence[int],
    shards: str = "",
) -> tuple[bytes, OffsetsFile] | None:
    """The offsets file of shards with these offsets (None: a shard's are not known), sizes and
    counts, and what the manifest says of it (``shards``: their :func:`shards_digest`); None
    where no shard's offsets are known."""
    if not any(o is not None for o in per_shard):
        return None
    big = max((s for s in filesizes if s is not None), default=0) >= np.iinfo(np.uint32).max
    dtype = "<u8" if big else "<u4"
    kind = _TYPES[dtype]
    parts = []
    for offsets, n in zip(per_shard, nsamples, strict=True):
        if offsets is None or len(offsets) != n:
            parts.append(np.full(n, np.iinfo(kind).max, dtype=kind))
        else:
            parts.append(np.asarray(offsets, dtype=kind))
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=kind)
    buf = io.BytesIO()
    np.save(buf, flat.astype(dtype, copy=False), allow_pickle=False)
    data = buf.getvalue()
    header = len(data) - flat.nbytes
    return data, OffsetsFile(OFFSETS_NAME, dtype, header, int(flat.size), shards)


def shard_offsets(
    data: bytes, of: OffsetsFile, filesize: int | None, where: str
) -> tuple[int, ...] | None:
    """One shard's offsets from the bytes :meth:`OffsetsFile.span` gave (None: not known for
    this shard). Offsets that cannot be a shard's (not from 0, not increasing, past its end)
    are an error naming ``where``."""
    values = np.frombuffer(data, dtype=of.dtype)
    if len(values) and int(values[0]) == of.unknown:
        return None
    bad = len(values) and (
        int(values[0]) != 0
        or bool(np.any(values[1:] <= values[:-1]))
        or (filesize is not None and filesize >= 0 and int(values[-1]) >= filesize)
    )
    if bad:
        raise ShardError(
            f"{where}: the sample offsets in {of.name} do not fit this shard (re-pack, or "
            "run `wdstool verify`)"
        )
    return tuple(values.tolist())


def read_all(data: bytes, of: OffsetsFile, nsamples: Sequence[int]) -> list[tuple[int, ...] | None]:
    """Every shard's offsets from a whole offsets file (an append carries them over)."""
    values = np.frombuffer(data, dtype=of.dtype, offset=of.data_offset, count=of.samples)
    out: list[tuple[int, ...] | None] = []
    at = 0
    for n in nsamples:
        part = values[at : at + n]
        at += n
        out.append(None if n and int(part[0]) == of.unknown else tuple(part.tolist()))
    return out


__all__ = [
    "OFFSETS_NAME",
    "OffsetsFile",
    "offsets_bytes",
    "read_all",
    "shard_offsets",
    "shards_digest",
]
