"""Our tar writer's headers field by field (POSIX ustar: the fixed metadata that makes packs
byte-identical), the limits on names and sizes, and the refusals with their messages."""

from __future__ import annotations

import io
import tarfile

import pytest

from wdstool.format.tar_write import BLOCK, END, _template, header, padding


def test_the_fixed_metadata_of_every_member() -> None:
    h = bytes(_template())
    assert len(h) == BLOCK
    assert h[100:108] == b"0000444\0"  # mode r--r--r--
    assert h[108:116] == h[116:124] == b"0000000\0"  # uid, gid 0
    assert h[136:148] == b"00000000000\0"  # mtime 0
    assert h[156:157] == b"0"  # a regular file
    assert h[257:263] == b"ustar\0" and h[263:265] == b"00"  # POSIX ustar magic and version
    assert h[:100] == bytes(100) and h[124:136] == bytes(12) and h[265:] == bytes(BLOCK - 265)
    assert bytes(2 * BLOCK) == END


def test_headers_as_tarfile_reads_them() -> None:
    h = header("dir/k.jpg", 1234)
    info = tarfile.TarInfo.frombuf(h, "ascii", "strict")  # checks the checksum too
    assert (info.name, info.size, info.mode, info.uid, info.gid, info.mtime) == (
        "dir/k.jpg", 1234, 0o444, 0, 0, 0,
    )  # fmt: skip
    assert info.type == tarfile.REGTYPE and (info.uname, info.gname) == ("", "")
    assert h[124:136] == b"00000002322\0" and h[148:156] == b"%06o\0 " % info.chksum


def test_name_and_size_limits() -> None:
    assert tarfile.TarInfo.frombuf(header("n" * 100, 0), "ascii", "strict").name == "n" * 100
    assert tarfile.TarInfo.frombuf(header("k", 8**11 - 1), "ascii", "strict").size == 8**11 - 1
    for bad in ("n" * 101, ""):
        with pytest.raises(ValueError) as info:
            header(bad, 1)
        assert str(info.value) == f"tar member name must be 1..100 ASCII bytes: {bad!r}"
    with pytest.raises(ValueError) as info:
        header("k.bin", 8**11)
    assert str(info.value) == f"member 'k.bin' too large for a ustar header: {8**11} bytes"
    with pytest.raises(UnicodeEncodeError):
        header("ké.jpg", 1)


def test_unsafe_names_are_refused_with_every_reason() -> None:
    with pytest.raises(ValueError) as info:
        header("/../x.jpg", 1)
    assert str(info.value) == "refusing tar member '/../x.jpg': absolute name, '..' in the path"


def test_padding_to_whole_blocks() -> None:
    assert [len(padding(n)) for n in (0, 1, 511, 512, 513, 1024)] == [0, 511, 1, 0, 511, 0]
    assert padding(1) == bytes(511)
    with tarfile.open(fileobj=io.BytesIO(header("a.txt", 3) + b"abc" + padding(3) + END)) as tf:
        assert tf.extractfile("a.txt").read() == b"abc"
