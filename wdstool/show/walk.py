"""Reading one shard's samples through ranged reads: the sample a byte offset falls into, whole,
and header walks over the samples after it.

From an offset, the header of the member holding it is found by reading backwards in steps
(:func:`wdstool.format.tar_read.header_offsets`), then the sample's first member by following
the chain of headers before that one while they share its key: all of that is the sample's
own bytes, so what is read beyond the sample is one backward step's overshoot and the
readahead after it. Where the chain cannot be followed (pax headers in front of a member, a
member far larger than the others), the next whole sample is taken instead. A header walk
reads the tar headers, the first bytes of each image and the small members (label, caption),
and skips image data unread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from wdstool.base.errors import ShardError
from wdstool.format.fields import LabelSpec
from wdstool.format.images import IMAGE_EXTENSIONS
from wdstool.format.tar_read import (
    BLOCK,
    MemberInfo,
    ObservedTarSampleReader,
    Sample,
    TarMember,
    TarSampleReader,
    header_offsets,
    split_key,
)
from wdstool.show.facts import Facts, image_ext, image_facts, needs_more, read_label
from wdstool.show.ranged import ShardFile

# first bytes of an image read for its header while walking: more where a JPEG's frame header
# lies further in (EXIF, an ICC profile in front of it)
HEADS = (1024, 8192, 65536)
CHAIN_MAX = 1 << 22  # how far back a sample's first member is looked for


@dataclass(frozen=True, kw_only=True)
class Picked:
    """A shown sample: its facts and the members read (the image whole)."""

    url: str
    facts: Facts
    parts: dict[str, bytes]


@dataclass(frozen=True, kw_only=True)
class Wanted:
    """What to read of a sample: members by extension (images whole, the rest small)."""

    exts: frozenset[str]
    label: LabelSpec | None


class ShardWalker:
    """Reads samples of one shard through a :class:`ShardFile`: whole ones (``full``) or
    header walks (image heads only), noting every member's extension and size."""

    def __init__(
        self, f: ShardFile, shard: int, wanted: Wanted, step: int, walk_share: float | None
    ) -> None:
        self.f = f
        self.walk_share = walk_share
        self.shard = shard
        self.wanted = wanted
        self.step = step  # bytes read per step when scanning backwards
        self.full = True
        self.skipping = False
        self.exts: list[str] = []
        self.sizes: dict[str, int] = {}
        self.ends: list[tuple[str | None, int]] = []  # (key, end) of the member headers seen

    def picks(
        self, offsets: list[int], walks: list[int], step: Callable[[int], None]
    ) -> tuple[list[Picked], dict[int, Facts]]:
        """The sample each offset falls into (the next one when that is shown already),
        each followed by a walk of that many samples' headers."""
        shown: list[Picked] = []
        walked: dict[int, Facts] = {}
        taken: set[int] = set()
        for offset, walk in zip(offsets, walks, strict=True):
            it = self._at_sample(offset)
            wrapped = False
            while True:
                got = self._next(it)
                if got is None and not wrapped:  # past the last sample: the shard's first
                    it = self._reader(0)
                    wrapped = True
                    continue
                if got is None or got[1].offset not in taken:
                    break
            if got is None:  # every sample of this shard is shown already
                continue
            sample, facts = got
            taken.add(facts.offset)
            shown.append(Picked(url=self.f.url, facts=facts, parts=sample.parts))
            step(1)
            self.full = False
            budget = (
                None if self.walk_share is None else self.f.fetched + self.walk_share * facts.nbytes
            )
            try:
                for _ in range(walk):
                    if budget is not None and self.f.fetched >= budget:
                        break
                    more = self._next(it)
                    if more is None:
                        break
                    walked.setdefault(more[1].offset, more[1])
            finally:
                self.full = True
        return shown, walked

    def everything(self, step: Callable[[int], None]) -> tuple[list[Picked], dict[int, Facts]]:
        """Every sample of the shard, whole."""
        shown = []
        it = self._reader(0)
        while (got := self._next(it)) is not None:
            shown.append(Picked(url=self.f.url, facts=got[1], parts=got[0].parts))
            step(1)
        return shown, {}

    # finding a sample from a byte offset ----------------------------------------------------
    def _at_sample(self, offset: int) -> Iterator[Sample]:
        """Samples from the one ``offset`` falls into: the header of the
        member holding ``offset`` is found scanning backwards, then the sample's earlier
        members by the chain of headers before it. Where that chain cannot be followed (pax
        headers, a member far larger than the others), the next whole sample instead."""
        at = self._header_before(offset)
        if at is None:
            return self._reader(0)
        start = self._sample_start(at)
        if start is not None:
            return self._reader(start)
        it = self._reader(at)
        self.skipping = True
        try:
            next(it, None)  # the rest of the sample ``offset`` fell into: headers only
        finally:
            self.skipping = False
        return it

    def _header_before(self, offset: int) -> int | None:
        """The last tar header block at or before ``offset``, read backwards step by step."""
        hi = min(offset - offset % BLOCK + BLOCK, self.f.size - self.f.size % BLOCK)
        chunk, steps = self.step, 0
        while hi > 0:
            lo = max(0, hi - chunk)
            found = header_offsets(self.f.pread(lo, hi - lo))
            if found:
                return lo + found[-1]
            hi, steps = lo, steps + 1
            chunk = self.step if steps < 16 else 2 * chunk  # a member far above the mean
        return None

    def _sample_start(self, at: int) -> int | None:
        """Where the sample of the member whose header is at ``at`` starts: walk back over
        the members before it that share its key. None when it cannot be told."""
        key = self._key_at(at)
        if key is None:
            return None
        start, width = at, self.step
        while start > 0:
            lo = max(0, start - width)
            chain = next(
                (
                    c
                    for p in header_offsets(self.f.pread(lo, start - lo))
                    if (c := self._chain(lo + p, start)) is not None
                ),
                None,
            )
            if chain is None:
                if lo == 0 or width >= CHAIN_MAX:
                    return None
                width *= 2
                continue
            for m in reversed(chain):
                if (split_key(m.name) or ("",))[0] != key:
                    return start
                start = m.offset
            width = self.step
        return start

    def _key_at(self, at: int) -> str | None:
        member = next(self._members(at), None)
        split = split_key(member.name) if member is not None else None
        return split[0] if split else None

    def _chain(self, at: int, end: int) -> list[MemberInfo] | None:
        """The members from the header at ``at`` up to the one at ``end``, if the headers
        from ``at`` lead exactly there (``at`` is then a real header, not image data)."""
        chain = []
        for m in self._members(at):
            if m.offset >= end:
                return chain if m.offset == end else None
            chain.append(m)
        return None

    def _members(self, at: int) -> Iterator[MemberInfo]:
        self.f.seek(at)
        try:
            yield from TarSampleReader(self.f, self.f.url, start_offset=at).members()
        except ShardError:  # not a header after all, or damage further on
            return

    # reading samples ------------------------------------------------------------------------
    def _keep(self, ext: str) -> bool:
        if self.skipping:
            return False
        self.exts.append(ext)
        return ext in self.wanted.exts or ext in IMAGE_EXTENSIONS

    def _lazy(self, offset: int, size: int) -> bytes:
        self.sizes[self.exts[-1]] = size
        if self.full:
            return self.f.pread(offset, size)
        head = b""
        for n in HEADS:
            head = self.f.pread(offset, min(size, n), readahead=0)  # the rest is skipped
            if not needs_more(head, size):
                break
        return head

    def _reader(self, start: int) -> Iterator[Sample]:
        self.f.seek(start)
        self.ends = []
        reader = ObservedTarSampleReader(
            self.f,
            self.f.url,
            on_member=self._seen,
            start_offset=start,
            keep=self._keep,
            lazy=self._lazy,
            lazy_exts=IMAGE_EXTENSIONS,
        )
        return iter(reader)

    def _seen(self, m: TarMember) -> None:
        split = split_key(m.name)
        self.ends.append((split[0] if split else None, m.data_offset + m.size + -m.size % BLOCK))

    def _end_of(self, key: str) -> int:
        """Where the sample ``key`` just read ends (its last member's padded data); the
        headers seen past it (the next sample's first member) are kept for that one."""
        end = max(e for k, e in self.ends if k == key)
        while self.ends and self.ends[0][1] <= end:
            self.ends.pop(0)
        return end

    def _next(self, it: Iterator[Sample]) -> tuple[Sample, Facts] | None:
        self.exts, self.sizes = [], {}
        sample = next(it, None)
        if sample is None:
            return None
        img = image_ext(sample.parts)
        label, _problem = read_label(self.wanted.label, sample.parts)
        facts = Facts(
            shard=self.shard,
            offset=sample.offset,
            nbytes=self._end_of(sample.key) - sample.offset,
            key=sample.key,
            exts=tuple(self.exts),
            label=label,
            image=None
            if img is None
            else image_facts(img, sample.parts[img], self.sizes.get(img, len(sample.parts[img]))),
        )
        self.exts, self.sizes = [], {}
        return sample, facts
