"""Which samples reshard carries, under which keys: pure, from the shards' scans.

In SRC order, shard order, member order: a sample whose members run on from the end of one
shard into the start of the next shard of the same SRC is joined into one; then ``--keys`` /
``--exclude-keys`` select by the source key; a sample that cannot be carried (a member unsafe to
extract, an image that does not re-encode) is skipped and listed, or fails the run; ``--dedupe``
keeps the first sample with a given image (sha256 of its image member) and lists the others; a
key seen before (in another SRC, elsewhere in the same one, or in DEST for ``--append``) is an
error naming both shards, or with ``--rename-collisions`` gets the first free ``KEY_<n>``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from shard_writer.tar_sources import Found, Piece, ShardScan, SourceSet, image_rank
from wdstool.base.errors import InputError
from wdstool.format.tar_write import member_size


@dataclass(frozen=True, slots=True)
class Carried:
    """One sample to write: its output key, its pieces (one per source shard it lies in) and
    its image member (``image``: (piece, member), None without one; ``payload``,
    ``image_suffix``: its stored size and new suffix when re-encoded)."""

    key: str
    pieces: tuple[Piece, ...]
    image: tuple[int, int] | None = None
    payload: int = -1
    image_suffix: str = ""

    def members(self) -> Iterator[tuple[int, int, str, int]]:
        """(piece, member, output name, stored size) of every member, in source order."""
        for p, piece in enumerate(self.pieces):
            for m, (suffix, _off, size) in enumerate(piece.members):
                if (p, m) == self.image and self.payload >= 0:
                    yield p, m, self.key + (self.image_suffix or suffix), self.payload
                else:
                    yield p, m, self.key + suffix, size

    def need(self) -> int:
        """Bytes the sample takes in a shard, headers and padding included."""
        return sum(member_size(name, size) for _p, _m, name, size in self.members())


@dataclass(frozen=True, kw_only=True)
class Selecting:
    """How samples are chosen (``keys``/``exclude``: None when not given)."""

    keys: frozenset[str] | None = None
    exclude: frozenset[str] | None = None
    dedupe: bool = False
    rename: bool = False
    fail: bool = True


@dataclass(kw_only=True)
class Selection:
    samples: list[Carried] = field(default_factory=list)  # in source order
    skipped: list[dict[str, str]] = field(default_factory=list)
    renamed: int = 0
    duplicates: int = 0


@dataclass(slots=True)
class _Group:
    key: str
    founds: list[Found]
    url: str


def _groups(
    sets: Sequence[SourceSet],
    scans: Sequence[ShardScan],
    urls: Sequence[str],
    out: Selection,
    fail: bool,
) -> Iterator[tuple[int, _Group]]:
    """(SRC index, sample) in order, samples split across consecutive shards joined."""
    shard = 0
    for n, src in enumerate(sets):
        held: _Group | None = None  # the last sample of the previous shard, not yet yielded
        for _ in src.urls:
            scan, url = scans[shard], urls[shard]
            shard += 1
            if scan.damage:
                if fail:
                    raise InputError(scan.damage)
                out.skipped.append({"path": url, "reason": scan.damage})
            for i, found in enumerate(scan.samples):
                if i == 0 and held is not None and held.key == found.key:
                    held.founds.append(found)
                    continue
                if held is not None:
                    yield n, held
                held = _Group(found.key, [found], url)
            if scan.damage and held is not None:  # never join across a damaged stretch
                yield n, held
                held = None
        if held is not None:
            yield n, held


def _carried(key: str, founds: list[Found]) -> Carried:
    image, best = None, None
    for p, f in enumerate(founds):
        if f.image >= 0:
            rank = image_rank(f.piece.members[f.image][0])
            if best is None or rank < best[0]:
                best, image = (rank, f), (p, f.image)
    chosen = best[1] if best is not None else None
    return Carried(
        key=key,
        pieces=tuple(f.piece for f in founds),
        image=image,
        payload=chosen.payload if chosen is not None else -1,
        image_suffix=chosen.image_suffix if chosen is not None else "",
    )


def select(
    sets: Sequence[SourceSet],
    scans: Sequence[ShardScan],
    urls: Sequence[str],
    how: Selecting,
    existing: int = 0,
) -> Selection:
    """The samples to carry from ``sets`` (the first ``existing`` of them are DEST's own shards
    for an append: their keys and images count, they are not carried)."""
    out = Selection()
    seen: dict[str, str] = {}  # key -> the shard it came from
    digests: dict[bytes, tuple[str, str]] = {}  # image sha256 -> (key, shard)
    matched: set[str] = set()
    for n, group in _groups(sets, scans, urls, out, how.fail):
        key, url = group.key, group.url
        if n >= existing:
            if how.keys is not None and key not in how.keys:
                continue
            if how.exclude is not None and key in how.exclude:
                matched.add(key)
                continue
            matched.add(key)
            problem = next((f.problem for f in group.founds if f.problem), "")
            if problem:
                if how.fail:
                    raise InputError(f"{url}: sample {key!r}: {problem}")
                out.skipped.append({"path": url, "key": key, "reason": problem})
                continue
        digest = next((f.digest for f in group.founds if f.digest is not None), None)
        if how.dedupe and digest is not None:
            if digest in digests:
                first_key, first_url = digests[digest]
                out.duplicates += 1
                out.skipped.append(
                    {
                        "path": url,
                        "key": key,
                        "reason": f"duplicate image of {first_key!r} in {first_url}",
                    }
                )
                continue
            digests[digest] = (key, url)
        new_key = key
        if key in seen:
            if not how.rename or n < existing:
                raise InputError(
                    f"key {key!r} is in both {seen[key]} and {url}; pass rename_collisions=True "
                    "to keep both (the later one as KEY_<n>), or leave one out"
                )
            k = 1
            while f"{key}_{k}" in seen:
                k += 1
            new_key = f"{key}_{k}"
            out.renamed += 1
        seen[new_key] = url
        if n >= existing:
            out.samples.append(_carried(new_key, group.founds))
    for wanted, setting in ((how.keys, "keys"), (how.exclude, "exclude_keys")):
        unknown = sorted(wanted - matched) if wanted is not None else []
        if unknown:
            shown = ", ".join(repr(k) for k in unknown[:3])
            raise InputError(
                f"{len(unknown)} key(s) of {setting}= name no sample of the sources, e.g. {shown}"
            )
    return out


def merge_source_classes(
    named: Sequence[tuple[str, tuple[str, ...] | None]],
) -> tuple[str, ...]:
    """The classes of the output: the SRCs' class lists (``(name, classes)``; None or empty:
    unknown) must agree, a shorter one being the start of a longer one, since ``.cls`` members
    are carried unchanged; InputError naming both SRCs otherwise."""
    best: tuple[str, tuple[str, ...]] | None = None
    for name, classes in named:
        if not classes:
            continue
        if best is None:
            best = (name, classes)
            continue
        short, long_ = sorted((best[1], classes), key=len)
        if long_[: len(short)] != short:
            i = next(i for i, (a, b) in enumerate(zip(best[1], classes, strict=False)) if a != b)
            raise InputError(
                f"{best[0]} and {name} have different classes (index {i}: {best[1][i]!r} vs "
                f"{classes[i]!r}); their .cls members would mean different things, so they "
                "cannot be merged"
            )
        if len(classes) > len(best[1]):
            best = (name, classes)
    return best[1] if best is not None else ()
