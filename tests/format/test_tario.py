"""The tar reader against real tars (tarfile, webdataset.TarWriter) and hostile ones."""

from __future__ import annotations

import io
import itertools
import tarfile
from pathlib import Path

import pytest
import webdataset as wds
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import jpeg_bytes
from tests.support.counting import CountingReader
from tests.support.tars import Pipe, build_tar
from wdstool.base.errors import ShardError
from wdstool.format.shard_formats import count_samples
from wdstool.format.tar_read import TarSampleReader


def simple(n: int = 6) -> list[tuple[str, dict[str, bytes]]]:
    return [
        (f"s{i:03d}", {"jpg": jpeg_bytes(i), "cls": b"%d" % (i % 3), "json": b"{}"})
        for i in range(n)
    ]


def read_all(data: bytes, **kw) -> list:
    return list(TarSampleReader(io.BytesIO(data), "mem://x.tar", **kw))


def test_same_samples_as_webdataset(tmp_path: Path) -> None:
    path = tmp_path / "a.tar"
    with wds.TarWriter(str(path)) as sink:
        for key, parts in simple(8):
            sink.write({"__key__": key, **parts})
    ours = read_all(path.read_bytes())
    theirs = list(wds.WebDataset(str(path), shardshuffle=False))
    assert [s.key for s in ours] == [s["__key__"] for s in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a.parts == {k: v for k, v in b.items() if not k.startswith("__")}


def test_long_names_and_pax_headers() -> None:
    long_key = "d/" + "x" * 150
    samples = [(long_key, {"jpg": b"abc", "cls": b"1"}), ("ü-ñame", {"txt": b"hi"})]
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        got = read_all(build_tar(samples, fmt=fmt))
        assert [(s.key, s.parts) for s in got] == samples


def test_non_regular_members_are_skipped() -> None:
    def extra(tf: tarfile.TarFile, key: str) -> None:
        for kind, name in (
            (tarfile.DIRTYPE, f"{key}.dir"),
            (tarfile.SYMTYPE, f"{key}.lnk"),
            (tarfile.LNKTYPE, f"{key}.hard"),
            (tarfile.CHRTYPE, f"{key}.dev"),
            (tarfile.FIFOTYPE, f"{key}.fifo"),
        ):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "/etc/passwd"
            tf.addfile(info)

    got = read_all(build_tar(simple(3), extra=extra))
    assert [sorted(s.parts) for s in got] == [["cls", "jpg", "json"]] * 3


def test_unkept_members_are_never_read() -> None:
    payload = b"\x80\x04PICKLE" * 10_000
    data = build_tar([(f"k{i}", {"cls": b"1", "pkl": payload}) for i in range(4)])
    f = CountingReader(data)
    got = list(
        TarSampleReader(io.BufferedReader(f, buffer_size=4096), "x", keep=lambda e: e != "pkl")
    )
    assert [sorted(s.parts) for s in got] == [["cls"]] * 4
    assert f.bytes_read < len(data) - 3 * len(payload)  # the pickles were seeked over


@pytest.mark.parametrize("cut", ["header", "data", "boundary-no-end"])
def test_truncation(cut: str) -> None:
    data = build_tar(simple(3))
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        members = list(tf)
    second = members[3]  # s001.jpg
    if cut == "header":
        data = data[: second.offset + 100]
    elif cut == "data":
        data = data[: second.offset_data + 50]
    else:  # exactly at a member boundary, end-of-archive blocks gone: a clean end
        data = data[: second.offset]
    if cut == "boundary-no-end":
        got = read_all(data)
        assert [sorted(s.parts) for s in got] == [["cls", "jpg", "json"]]
        return
    with pytest.raises(ShardError, match=r"mem://x.tar: truncated .* at offset \d+"):
        read_all(data)


def test_bad_checksum_and_huge_member_fail_fast() -> None:
    data = bytearray(build_tar(simple(2)))
    bad = bytearray(data)
    bad[10] ^= 0xFF
    with pytest.raises(ShardError, match="checksum at offset 0"):
        read_all(bytes(bad))
    info = tarfile.TarInfo("big.jpg")
    info.size = 1 << 40
    hdr = info.tobuf(tarfile.GNU_FORMAT)
    with pytest.raises(ShardError, match="declares 1099511627776 bytes"):
        read_all(hdr + b"\0" * 1024)


def test_skip_then_iterate_and_offsets() -> None:
    data = build_tar(simple(7))
    full = read_all(data)
    for n in range(8):
        for stream in (io.BytesIO(data), io.BufferedReader(Pipe(data))):
            r = TarSampleReader(stream, "x")
            r.skip(n)
            rest = list(r)
            assert [(s.key, s.parts) for s in rest] == [(s.key, s.parts) for s in full[n:]]
    r = TarSampleReader(io.BytesIO(data), "x")
    offsets = []
    for s in r:
        offsets.append((s.offset, r.offset))
    for (_, after), (start_next, _) in itertools.pairwise(offsets):
        assert after == start_next
    with pytest.raises(ShardError, match="only 7 samples"):
        TarSampleReader(io.BytesIO(data), "x").skip(8)


def test_start_offset_resumes_mid_stream() -> None:
    data = build_tar(simple(5))
    full = read_all(data)
    at = full[2].offset
    got = list(TarSampleReader(io.BytesIO(data[at:]), "x", start_offset=at))
    assert [s.key for s in got] == [s.key for s in full[2:]]
    assert got[0].offset == at


def test_count_samples() -> None:
    data = build_tar(simple(9))
    assert count_samples(io.BytesIO(data), "x") == 9
    assert count_samples(io.BufferedReader(Pipe(data)), "x") == 9


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_fuzz_only_shard_errors(data) -> None:
    base = bytearray(build_tar(simple(2)))
    mode = data.draw(st.sampled_from(["random", "mutate", "cut"]))
    if mode == "random":
        blob = data.draw(st.binary(min_size=0, max_size=3000))
    elif mode == "mutate":
        for _ in range(data.draw(st.integers(1, 20))):
            pos = data.draw(st.integers(0, len(base) - 1))
            base[pos] = data.draw(st.integers(0, 255))
        blob = bytes(base)
    else:
        blob = bytes(base[: data.draw(st.integers(0, len(base)))])
    try:
        for s in TarSampleReader(io.BytesIO(blob), "fuzz", max_member_size=1 << 20):
            assert isinstance(s.key, str)
    except ShardError:
        pass
