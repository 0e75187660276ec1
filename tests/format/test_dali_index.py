"""DALI index files from tar headers: the member scan and the pure layout -> text function."""

from __future__ import annotations

import io
import tarfile

import pytest

from tests.support.counting import CountingReader
from tests.support.dali_idx import Component, check_index_against_tar, parse_dali_index
from tests.support.tars import Pipe
from wdstool.base.errors import ShardError
from wdstool.format.dali_index import dali_index, dali_index_name, split_name
from wdstool.format.tar_read import MemberInfo, TarSampleReader
from wdstool.format.tar_write import END, write_member


def tar_of(members: list[tuple[str, bytes]], fmt=tarfile.USTAR_FORMAT, extra=None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if extra is not None:
                extra(info)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sample_members(n: int = 4) -> list[tuple[str, bytes]]:
    out = []
    for i in range(n):
        out += [
            (f"k{i:03d}.jpg", bytes([i]) * (700 + 300 * i)),
            (f"k{i:03d}.cls", b"%d" % (i % 3)),
            (f"k{i:03d}.json", b'{"i": %d}' % i),
        ]
    return out


def scan(data: bytes, f=None) -> list[MemberInfo]:
    return list(TarSampleReader(f if f is not None else io.BytesIO(data), "t.tar").members())


# --- the member scan ------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_members_match_tarfile_offsets_with_long_names_and_pax(fmt) -> None:
    long_dir = "d" * 120 + "/"
    members = [(long_dir + n, d) for n, d in sample_members(3)] + [("plain.txt", b"x" * 513)]
    if fmt == tarfile.USTAR_FORMAT:
        members = [(n.replace(long_dir, "dir/"), d) for n, d in members]
    pax = (lambda info: setattr(info, "pax_headers", {"comment": "c" * 600})) if fmt == 2 else None
    data = tar_of(members, fmt, pax)
    got = scan(data)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        want = [(m.name, m.offset, m.offset_data, m.size) for m in tf.getmembers()]
    assert [(m.name, m.offset, m.data_offset, m.size) for m in got] == want
    if fmt != tarfile.USTAR_FORMAT:  # extended headers: the data is not just past one header
        assert all(m.data_offset > m.offset + 512 for m in got if m.name.startswith(long_dir))


def test_members_read_only_headers_from_a_seekable_file() -> None:
    members = sample_members(5)
    data = tar_of(members)
    f = CountingReader(data)
    got = scan(data, io.BufferedReader(f, buffer_size=512))
    assert len(got) == len(members)
    # one header per member and the end-of-archive block; not one byte of member data
    assert f.bytes_read == 512 * (len(members) + 1)
    assert sum(m.size for m in got) > 5 * 512


def test_members_from_a_stream_and_links_dirs_skipped() -> None:
    def add_extras(tf: tarfile.TarFile) -> None:
        d = tarfile.TarInfo("sub")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
        link = tarfile.TarInfo("k000.lnk")
        link.type = tarfile.SYMTYPE
        link.linkname = "k000.jpg"
        tf.addfile(link)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        add_extras(tf)
        for name, data in sample_members(2):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    names = [m.name for m in scan(data, io.BufferedReader(Pipe(data)))]
    assert names == [n for n, _ in sample_members(2)]


def test_truncated_header_is_an_error_naming_the_offset() -> None:
    data = tar_of(sample_members(2))
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        at = tf.getmembers()[3].offset
    with pytest.raises(ShardError, match=rf"t\.tar: truncated tar header at offset {at}$"):
        scan(data[: at + 100])


# --- the index text -------------------------------------------------------------------------
def test_exact_text_in_dalis_v12_format() -> None:
    members = [
        MemberInfo(name="a.jpg", offset=0, data_offset=512, size=1000),
        MemberInfo(name="a.cls", offset=2048, data_offset=2560, size=1),
        MemberInfo(name="b.seg.PNG", offset=3072, data_offset=3584, size=3),
    ]
    index = dali_index(members, "t.tar")
    assert index.text == ("v1.2 2\njpg 512 1000 a.jpg cls 2560 1 a.cls\nseg.PNG 3584 3 b.seg.PNG\n")
    assert (index.samples, index.members) == (2, 3)


def test_grouping_follows_dali_rules() -> None:
    names = [
        "x/k1.jpg",  # key "x/k1"
        "x/k1.txt",
        ".hidden.jpg",  # hidden: out
        "x/.also.jpg",  # hidden in a folder: out
        "noext",  # no extension: out
        "empty.",  # empty extension: out
        "y.k1.jpg",  # key "y", extension "k1.jpg"
        "x/k1.cls",  # same key as before but not consecutive: a new sample, as in DALI
    ]
    members = [
        MemberInfo(name=n, offset=1024 * i, data_offset=1024 * i + 512, size=5)
        for i, n in enumerate(names)
    ]
    samples = parse_dali_index(dali_index(members, "t.tar").text)
    assert [[(c.ext, c.filename) for c in s] for s in samples] == [
        [("jpg", "x/k1.jpg"), ("txt", "x/k1.txt")],
        [("k1.jpg", "y.k1.jpg")],
        [("cls", "x/k1.cls")],
    ]
    assert split_name("a/b.c/d.e.f") == ("a/b.c/d", "e.f")


@pytest.mark.parametrize("name", ["has space.jpg", "tab\t.jpg", "new\nline.jpg"])
def test_names_dali_cannot_parse_are_refused(name: str) -> None:
    members = [MemberInfo(name=name, offset=0, data_offset=512, size=1)]
    with pytest.raises(ShardError, match=r"t\.tar: member .* whitespace or control"):
        dali_index(members, "t.tar")


def test_a_shard_without_samples_is_refused() -> None:
    with pytest.raises(ShardError, match=r"t\.tar: no samples"):
        dali_index([MemberInfo(name=".x.jpg", offset=0, data_offset=512, size=1)], "t.tar")


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_index_of_real_tars_points_at_every_members_bytes(fmt) -> None:
    prefix = "p" * 110 + "/" if fmt != tarfile.USTAR_FORMAT else "p/"
    data = tar_of([(prefix + n, d) for n, d in sample_members(4)], fmt)
    samples = check_index_against_tar(dali_index(scan(data), "t.tar").text, data)
    assert len(samples) == 4 and all(len(s) == 3 for s in samples)


def test_index_of_our_writer_and_its_fixed_headers() -> None:
    buf = io.BytesIO()
    for name, data in sample_members(3):
        write_member(buf.write, name, data)
    buf.write(END)
    data = buf.getvalue()
    samples = check_index_against_tar(dali_index(scan(data), "t.tar").text, data)
    assert samples[0] == [
        Component("jpg", 512, 700, "k000.jpg"),
        Component("cls", 512 + 1024 + 512, 1, "k000.cls"),
        Component("json", 512 + 1024 + 1024 + 512, 8, "k000.json"),
    ]


def test_index_file_names() -> None:
    assert dali_index_name("train-000000.tar") == "train-000000.idx"
    assert dali_index_name("sub/a-1.tar") == "sub/a-1.idx"
    assert dali_index_name("shard.tgz") == "shard.tgz.idx"
