"""DALI's webdataset index (``.idx``): the tar layout of one shard as text, for
``nvidia.dali.fn.readers.webdataset(paths=..., index_paths=...)``.

The format is the one DALI's ``tools/wds2idx.py`` writes (version ``v1.2``) and its reader
(``dali/operators/reader/loader/webdataset_loader.cc``) parses::

    v1.2 <number of samples>
    <ext> <offset> <size> <filename> [<ext> <offset> <size> <filename> ...]   one line per sample

- ``offset`` is where the member's DATA starts (its header + 512 bytes, past any pax or GNU
  long-name headers): DALI seeks there and reads ``size`` bytes; it rejects offsets that are not
  a multiple of 512.
- A member's name splits at the first dot after its last ``/``: ``dir/key.seg.jpg`` has the key
  ``dir/key`` and the extension ``seg.jpg`` (case kept; DALI lower-cases when it matches unless
  ``case_sensitive_extensions``). Consecutive members sharing a key are one sample, in archive
  order.
- Only regular files count; members whose name has no (or an empty) extension, and hidden ones (a last path
  component starting with a dot), are left out, as wds2idx leaves out hidden ones.
- Fields are separated by single spaces and parsed with ``>>``: a name with whitespace cannot
  be written (an error here, not a broken index there). The sample count must be positive.

Pure: members in, text out. Reading the tar headers is ``tar_read.TarSampleReader.members``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from wdstool.base.errors import ShardError
from wdstool.format.tar_read import BLOCK, MemberInfo

DALI_INDEX_VERSION = "v1.2"
DALI_INDEX_SUFFIX = ".idx"


@dataclass(frozen=True, kw_only=True)
class DaliIndex:
    text: str
    samples: int
    members: int


def split_name(name: str) -> tuple[str, str] | None:
    """(key, extension) as DALI splits a member name; None for a hidden or extension-less one."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot < 0 or dot == slash + 1 or dot == len(name) - 1:
        return None
    return name[:dot], name[dot + 1 :]


def dali_index(members: Iterable[MemberInfo], url: str) -> DaliIndex:
    """The ``.idx`` text for a shard with these regular-file ``members`` (archive order).
    ``url`` names the shard in errors."""
    lines: list[str] = []
    current: list[str] = []
    last_key: str | None = None
    count = 0
    for m in members:
        split = split_name(m.name)
        if split is None:
            continue
        if any(c.isspace() for c in m.name) or not m.name.isprintable():
            raise ShardError(
                f"{url}: member {m.name!r} at offset {m.offset} has whitespace or control "
                "characters in its name, which a DALI index cannot hold"
            )
        if m.data_offset % BLOCK:
            raise ShardError(
                f"{url}: member {m.name!r} data at offset {m.data_offset} is unaligned"
            )
        key, ext = split
        if key != last_key and current:
            lines.append(" ".join(current))
            current = []
        last_key = key
        current.append(f"{ext} {m.data_offset} {m.size} {m.name}")
        count += 1
    if current:
        lines.append(" ".join(current))
    if not lines:
        raise ShardError(f"{url}: no samples, and a DALI index must list at least one")
    text = f"{DALI_INDEX_VERSION} {len(lines)}\n" + "".join(line + "\n" for line in lines)
    return DaliIndex(text=text, samples=len(lines), members=count)


def dali_index_name(shard_name: str) -> str:
    """``train-000000.tar`` -> ``train-000000.idx`` (wds2idx's default); other names get
    ``.idx`` appended."""
    stem = shard_name[: -len(".tar")] if shard_name.endswith(".tar") else shard_name
    return stem + DALI_INDEX_SUFFIX
