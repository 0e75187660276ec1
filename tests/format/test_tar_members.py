"""Member sizes at the tar block edges: 0 bytes (img2dataset's empty ``.txt`` captions) and
multiples of 512 have no padding; every other size is padded to the next block. Each size is read
kept, skipped and lazily, from a seekable file and from a stream, next to members of other sizes
so that a padding error shifts every later header."""

from __future__ import annotations

import io
import tarfile

import pytest

from tests.support.tars import Pipe, build_tar
from wdstool.format.shard_formats import count_samples
from wdstool.format.tar_read import (
    BLOCK,
    MemberInfo,
    ObservedTarSampleReader,
    TarSampleReader,
)
from wdstool.format.tar_write import END, member_bytes, write_member

SIZES = [0, 1, 511, 512, 513, 1024, 2560, 3000]


def _payload(size: int, seed: int) -> bytes:
    return bytes((seed * 31 + i * 7) % 251 for i in range(size))


def _samples() -> list[tuple[str, dict[str, bytes]]]:
    """One sample per size: a ``txt`` of that size between members of other sizes."""
    return [
        (f"k{i:02d}", {"cls": b"%d" % i, "txt": _payload(size, i), "json": _payload(600 + i, i)})
        for i, size in enumerate(SIZES)
    ]


def _streams(data: bytes) -> list[io.IOBase]:
    return [io.BytesIO(data), io.BufferedReader(Pipe(data), buffer_size=700)]


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("stream", ["seekable", "pipe"])
def test_kept_members_of_every_size(fmt: int, stream: str) -> None:
    samples = _samples()
    data = build_tar(samples, fmt)
    f = _streams(data)[stream == "pipe"]
    reader = TarSampleReader(f, "mem://edges.tar")
    got = [(s.key, s.parts) for s in reader]
    assert got == samples


@pytest.mark.parametrize("stream", ["seekable", "pipe"])
@pytest.mark.parametrize("skipped", ["txt", "json", "cls"])
def test_skipped_members_of_every_size(stream: str, skipped: str) -> None:
    samples = _samples()
    data = build_tar(samples)
    f = _streams(data)[stream == "pipe"]
    got = [(s.key, s.parts) for s in TarSampleReader(f, "x", keep=lambda ext: ext != skipped)]
    want = [(k, {e: v for e, v in parts.items() if e != skipped}) for k, parts in samples]
    assert got == want


def test_lazy_members_of_every_size_point_at_their_bytes() -> None:
    samples = _samples()
    data = build_tar(samples)
    reader = TarSampleReader(
        io.BytesIO(data), "x", lazy=lambda at, size: (at, size), lazy_exts=frozenset({"txt"})
    )
    got = list(reader)
    assert [s.key for s in got] == [k for k, _ in samples]
    for sample, (_, parts) in zip(got, samples, strict=True):
        at, size = sample.parts["txt"]
        assert at % BLOCK == 0 and data[at : at + size] == parts["txt"]
        assert sample.parts["json"] == parts["json"] and sample.parts["cls"] == parts["cls"]


def test_skip_and_count_over_every_size() -> None:
    samples = _samples()
    data = build_tar(samples)
    for f in _streams(data):
        assert count_samples(f, "x") == len(SIZES)
    for n in range(len(SIZES) + 1):
        for f in _streams(data):
            r = TarSampleReader(f, "x")
            r.skip(n)
            assert [s.key for s in r] == [k for k, _ in samples[n:]]


def test_member_listing_matches_tarfile() -> None:
    data = build_tar(_samples(), tarfile.GNU_FORMAT)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        want = [MemberInfo(m.name, m.offset, m.offset_data, m.size) for m in tf.getmembers()]
    for f in _streams(data):
        assert list(TarSampleReader(f, "x").members()) == want
    seen = []
    list(ObservedTarSampleReader(io.BytesIO(data), "x", on_member=seen.append))
    assert [(m.name, m.offset, m.data_offset, m.size) for m in seen] == [
        (w.name, w.offset, w.data_offset, w.size) for w in want
    ]


def test_our_writer_pads_every_size_as_tarfile_reads_it() -> None:
    buf = io.BytesIO()
    for key, parts in _samples():
        for ext, payload in parts.items():
            before = buf.tell()
            n = write_member(buf.write, f"{key}.{ext}", payload)
            assert n == buf.tell() - before == member_bytes(len(payload))
    data = buf.getvalue() + END
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        got = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
    want = {f"{k}.{e}": v for k, parts in _samples() for e, v in parts.items()}
    assert got == want
    assert [(s.key, s.parts) for s in TarSampleReader(io.BytesIO(data), "x")] == _samples()
