"""Pack a listing of documents (:mod:`shard_writer.interleaved`): probe every image, lay the
samples out in shards, write them, and the facts the manifest keeps per shard.

Every image of every row is probed as a listing's single images are (headers and end markers;
``--verify-decode`` decodes them, re-encoding options apply to each). A row with an image that
does not probe (missing, not an image, truncated; a video) is left out whole under
``--on-error skip``, listed with its row, the image and why; under ``raise`` it is the one-line
error naming the listing row and the image, before any shard is written. The layout is pack's
(:func:`shard_writer.layout.group_samples`): the pack-time shuffle, the shard limits, keys from
the row index and the first image's name. A sample's members (``KEY.0.jpg``, ...,
``KEY.cls``, ``KEY.json``) are written in that order.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any

from shard_writer.append import Base, merge_classes
from shard_writer.commit import Job
from shard_writer.dest import Destination
from shard_writer.execute import Engine
from shard_writer.image import BadImage
from shard_writer.interleaved import Doc, InterleavedScan
from shard_writer.layout import (
    END_OF_ARCHIVE,
    LayoutOptions,
    Numbering,
    group_samples,
    sample_key,
    shard_name,
)
from shard_writer.options import PackOptions, ProgressFn
from shard_writer.probe import EncodeOptions, ImageInfo, Payload, payload_for, probe_files
from shard_writer.scan import Skipped, describe, printable
from shard_writer.write import ShardOutcome, write_published
from wdstool.base.errors import ConfigError, InputError, OnError
from wdstool.format.conversation import named
from wdstool.format.interleaved import InterleavedShard, image_member
from wdstool.format.tar_write import END, member_bytes, write_member

VIDEO = "a video (a sample of several images holds images only)"


def probe_docs(
    scan: InterleavedScan,
    encode: EncodeOptions,
    *,
    fail: bool,
    progress: Callable[[int], None] | None = None,
    pool: Executor | None = None,
) -> tuple[list[Doc], list[tuple[ImageInfo, ...]], list[Skipped]]:
    """(the documents whose images all probe, in scan order, each with its images' sizes
    known; their images' infos; the rows left out: one each, naming its first bad image)."""
    good, infos, bad = probe_files(scan, encode, fail=fail, progress=progress, pool=pool)
    found: dict[int, tuple[Any, ImageInfo | str]] = {}
    for f, info in zip(good, infos, strict=True):
        found[f.index] = (f, VIDEO if info.video else info)
        if info.video and fail:
            raise InputError(scan.describe(f, VIDEO))
    reasons = iter(bad)
    for f in scan.files:
        if f.index not in found:
            found[f.index] = (f, next(reasons).reason)
    docs, doc_infos, skipped = [], [], []
    for doc in scan.docs:
        got = [found[f.index] for f in doc.images]
        why = next(((f, r) for f, r in got if isinstance(r, str)), None)
        if why is not None:
            skipped.append(Skipped(printable(why[0].relpath), why[1], doc.file.row))
            continue
        docs.append(replace(doc, images=tuple(f for f, _ in got)))
        doc_infos.append(tuple(r for _, r in got if isinstance(r, ImageInfo)))
    return docs, doc_infos, skipped


def doc_json(doc: Doc, infos: Sequence[ImageInfo], classes: Sequence[str]) -> bytes:
    """The ``KEY.json`` payload: ``texts`` and ``images`` (parallel lists; a conversation's
    ``messages`` instead), ``paths`` (each image's source), a label's ``class_index``/``class``,
    and the row's other columns, which win over those but not over the lists. Canonical JSON
    (sorted keys, ASCII)."""
    f = doc.file
    members = iter(image_member(n, info.ext) for n, info in enumerate(infos))
    meta: dict[str, object] = {"paths": [printable(i.relpath) for i in doc.images]}
    if f.class_idx >= 0:
        meta["class_index"] = f.class_idx
        if classes:
            meta["class"] = classes[f.class_idx]
    if f.extra:
        meta.update(json.loads(f.extra))
    if doc.messages is not None:  # a conversation: roles and turns, its images named
        meta["messages"] = named(doc.messages, list(members))
    else:
        meta["texts"] = list(doc.texts)
        meta["images"] = [next(members) if t is None else None for t in doc.texts]
    return json.dumps(meta, sort_keys=True, separators=(",", ":")).encode("ascii")


def doc_members(
    doc: Doc,
    infos: Sequence[ImageInfo],
    key: str,
    payloads: Sequence[bytes],
    classes: Sequence[str],
) -> list[tuple[str, bytes]]:
    """(member name, bytes) of one sample, in the order they are written."""
    members = [
        (f"{key}.{image_member(n, info.ext)}", data)
        for n, (info, data) in enumerate(zip(infos, payloads, strict=True))
    ]
    if doc.file.class_idx >= 0:
        members.append((f"{key}.cls", b"%d" % doc.file.class_idx))
    members.append((f"{key}.json", doc_json(doc, infos, classes)))
    return members


def doc_bound(doc: Doc, infos: Sequence[ImageInfo], classes: Sequence[str]) -> int:
    """Bytes the sample takes in a shard, at most (restart markers never add any)."""
    need = sum(member_bytes(info.payload_size) for info in infos)
    need += member_bytes(len(doc_json(doc, infos, classes)))
    if doc.file.class_idx >= 0:
        need += member_bytes(len(str(doc.file.class_idx)))
    return need


@dataclass(frozen=True, kw_only=True)
class DocShard:
    """One shard of documents: its position, name, samples (with their images' infos) in
    member order, keys and size bound."""

    index: int
    name: str
    docs: tuple[Doc, ...]
    infos: tuple[tuple[ImageInfo, ...], ...]
    keys: tuple[str, ...]
    size_bound: int

    def facts(self) -> InterleavedShard:
        """What the manifest keeps of it: images per sample, their sizes, text lengths."""
        return InterleavedShard(
            images=tuple(len(i) for i in self.infos),
            sizes=tuple((info.width, info.height) for i in self.infos for info in i),
            chars=tuple(doc.chars for doc in self.docs),
        )


def plan_docs(
    docs: Sequence[Doc],
    infos: Sequence[tuple[ImageInfo, ...]],
    classes: Sequence[str],
    *,
    options: LayoutOptions,
    prefix: str = "train",
    numbering: Numbering | None = None,
) -> tuple[DocShard, ...]:
    """The shards of ``docs``, as :func:`shard_writer.layout.plan_layout` lays out samples."""
    numbering = numbering or Numbering()
    needs = [doc_bound(d, i, classes) for d, i in zip(docs, infos, strict=True)]
    groups = group_samples(needs, options)
    first, start = numbering.first_shard, numbering.first_key
    width = max(9, len(str(max(len(docs) - 1 + start, 0))))
    return tuple(
        DocShard(
            index=first + n,
            name=shard_name(prefix, first + n, first + len(groups)),
            docs=tuple(docs[i] for i in group),
            infos=tuple(infos[i] for i in group),
            keys=tuple(sample_key(docs[i].file, width, start) for i in group),
            size_bound=END_OF_ARCHIVE + sum(needs[i] for i in group),
        )
        for n, group in enumerate(groups)
    )


@dataclass(frozen=True, kw_only=True)
class DocShardTask:
    """Write one shard of documents (picklable: it runs in pack's workers)."""

    root: str
    dest_url: str
    storage_options: dict[str, Any] | None
    spec: DocShard
    classes: tuple[str, ...]
    encode: EncodeOptions
    listing: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def payloads(self, doc: Doc, infos: Sequence[ImageInfo]) -> Iterator[Payload]:
        for f, info in zip(doc.images, infos, strict=True):
            try:
                yield payload_for(self.root, f, info, self.encode, self.storage_options)
            except BadImage as exc:  # probed fine: the file changed since
                raise InputError(describe(self.root, self.listing, f, str(exc))) from None

    def write(self, on_sample: Callable[[int], None] | None = None) -> ShardOutcome:
        return write_published(
            self.dest_url,
            self.storage_options,
            self.spec.name,
            lambda w: self._produce(w, on_sample),
        )

    def _produce(
        self, write: Callable[[bytes], None], on_sample: Callable[[int], None] | None
    ) -> tuple[int, int, int, dict[str, int]]:
        spec = self.spec
        filesize = source_bytes = 0
        restarts: Counter[str] = Counter()
        for doc, infos, key in zip(spec.docs, spec.infos, spec.keys, strict=True):
            got = list(self.payloads(doc, infos))
            data = [p.data for p in got]
            for name, payload in doc_members(doc, infos, key, data, self.classes):
                filesize += write_member(write, name, payload)
            nread = sum(p.nread for p in got)
            source_bytes += nread
            restarts.update(p.restarts for p in got if p.restarts)
            if on_sample is not None:
                on_sample(nread)
        write(END)
        return len(spec.docs), filesize + len(END), source_bytes, dict(restarts)


def doc_fingerprint(scan: InterleavedScan, specs: Sequence[DocShard], options: PackOptions) -> str:
    """What the shards are made of: options, classes, and per sample its key, label, texts,
    other columns and its images' paths and sizes."""
    h = hashlib.sha256()
    recorded = {"options": options.recorded(), "classes": scan.classes, "interleaved": 1}
    h.update(json.dumps(recorded).encode())
    for spec in specs:
        h.update(spec.name.encode())
        for doc, key in zip(spec.docs, spec.keys, strict=True):
            images = [[f.relpath, f.size] for f in doc.images]
            row = [key, doc.file.class_idx, doc.file.extra, list(doc.texts), images]
            if doc.messages is not None:
                row.append(list(doc.messages))
            h.update(b"\0" + json.dumps(row).encode("ascii"))
    return h.hexdigest()


def docs_job(
    scan: InterleavedScan,
    src: str,
    dest: Destination,
    options: PackOptions,
    eng: Engine,
    *,
    base: Base | None,
    progress: ProgressFn,
    on_total: Callable[[int, int, str], None] | None,
) -> Job:
    """Probe and lay out a listing of documents: the write that :func:`shard_writer.commit`
    does, with each shard's facts for the manifest."""
    if base is not None and base.manifest.shards and base.manifest.interleaved is None:
        raise ConfigError(
            f"{dest.display()}: holds samples of one image; samples of several images "
            "cannot be appended to it (pack them into a data set of their own)"
        )
    if on_total:
        on_total(len(scan.files), 0, "probe")
    docs, infos, skipped = probe_docs(
        scan,
        options.encode,
        fail=options.on_error is OnError.RAISE,
        progress=lambda n: progress(n, 0, 0),
        pool=eng.pool,
    )
    if not docs:
        raise InputError(f"{scan.name}: no valid samples: all {len(skipped)} rows were skipped")
    numbering = Numbering()
    if base is not None:
        classes, index = merge_classes(base.manifest.classes, scan.classes, scan.name)
        if index != list(range(len(index))):  # new class names among DEST's: renumbered
            docs = [
                replace(d, file=replace(d.file, class_idx=index[d.file.class_idx]))
                if d.file.class_idx >= 0
                else d
                for d in docs
            ]
        scan = replace(scan, classes=classes)
        numbering = Numbering(first_shard=base.first_shard, first_key=base.next_key)
    layout = options.layout
    specs = plan_docs(
        docs, infos, scan.classes, options=layout, prefix=options.prefix, numbering=numbering
    )
    appended = ""
    if base is not None:  # what is added, wherever it lands: a rerun adds nothing
        appended = doc_fingerprint(
            scan, plan_docs(docs, infos, scan.classes, options=layout), options
        )
    tasks = [
        DocShardTask(
            root=scan.root,
            dest_url=dest.url,
            storage_options=dest.storage_options,
            spec=spec,
            classes=scan.classes,
            encode=options.encode,
            listing=scan.listing,
        )
        for spec in specs
    ]
    return Job(
        dest=dest,
        options=options,
        tasks=tasks,
        fingerprint=doc_fingerprint(scan, specs, options),
        classes=scan.classes,
        recorded=options.recorded(),
        skipped=[s.to_json() for s in skipped],
        samples=len(docs),
        base=base,
        appended=appended,
        inputs=(src,),
        next_key=numbering.first_key + len(scan.docs),
        interleaved={spec.name: spec.facts() for spec in specs},
    )
