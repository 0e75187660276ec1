"""Tar headers as other writers make them, byte by byte: numbers padded with NULs or in GNU
base-256, checksums stored without a leading zero or summed over signed bytes, pax records with
``=`` or undecodable bytes, keys with dotted folders and extensions; short reads from a stream;
and the exact one-line error, with the URL and offset, for each malformed header."""

from __future__ import annotations

import io
import logging
import tarfile

import pytest

from tests.support.counting import CountingReader
from wdstool.base.errors import ShardError
from wdstool.format.shard_formats import count_samples
from wdstool.format.tar_read import (
    BLOCK,
    ObservedTarSampleReader,
    TarSampleReader,
    _pax_records,
    split_key,
)

URL = "mem://h.tar"
END = bytes(2 * BLOCK)


def header(name: bytes, size: int, kind: bytes = b"0") -> bytearray:
    info = tarfile.TarInfo(name.decode("latin-1"))
    info.size, info.type = size, kind
    return bytearray(info.tobuf(tarfile.USTAR_FORMAT, encoding="latin-1"))


def seal(h: bytearray, signed: bool = False, field: bytes | None = None) -> bytes:
    """Write the checksum: the unsigned byte sum (or the signed one old tars wrote), as
    ``%06o\\0 `` unless ``field`` formats it (``{}`` for the octal digits)."""
    h[148:156] = b" " * 8
    total = sum(b - 256 if signed and b > 127 else b for b in h)
    if field and b"%" in field:
        text = field % total
    else:
        text = (field or b"%06o\0 ").replace(b"{}", b"%o" % total) if field else b"%06o\0 " % total
    h[148:156] = text.ljust(8, b"\0")[:8]
    return bytes(h)


def member(name: bytes, data: bytes, **kw) -> bytes:
    return seal(header(name, len(data)), **kw) + data + bytes(-len(data) % BLOCK)


def read(data: bytes, **kw) -> list[tuple[str, dict]]:
    return [(s.key, s.parts) for s in TarSampleReader(io.BytesIO(data), URL, **kw)]


def error(data: bytes, **kw) -> str:
    with pytest.raises(ShardError) as info:
        read(data, **kw)
    return info.value.message


class Trickle(io.RawIOBase):
    """A stream that hands out at most ``most`` bytes per read (a whole header, not a whole
    member), and cannot seek."""

    def __init__(self, data: bytes, most: int = 700) -> None:
        self._b, self.most = io.BytesIO(data), most

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        return self._b.readinto(memoryview(b)[: self.most])


class ReadOnly:
    """Only ``read``: no ``seekable`` at all (some HTTP bodies)."""

    def __init__(self, data: bytes) -> None:
        self._b = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._b.read(n)


# --- numbers --------------------------------------------------------------------------------
def test_sizes_padded_with_nuls_or_spaces_or_empty() -> None:
    data = b"x" * 1000
    h = header(b"k.bin", 0)
    h[124:136] = b"1750" + bytes(8)  # 1000, left-justified, NUL-padded
    spaced = header(b"k.txt", 0)
    spaced[124:136] = b"  1750     \0"
    empty = header(b"k.cls", 0)
    empty[124:136] = bytes(12)  # no digits at all: 0 bytes
    tar = seal(h) + data + bytes(24) + seal(spaced) + data + bytes(24) + seal(empty) + END
    assert read(tar) == [("k", {"bin": data, "txt": data, "cls": b""})]


def test_gnu_base_256_sizes() -> None:
    h = header(b"k.jpg", 0)
    h[124:136] = b"\x80" + (300).to_bytes(11, "big")
    assert read(seal(h) + b"y" * 300 + bytes(212) + END) == [("k", {"jpg": b"y" * 300})]
    h[124:136] = b"\x80\x40" + bytes(10)  # 2**86: the second byte counts
    assert error(seal(h) + END) == (
        f"{URL}: member at offset 0 declares {2**86} bytes (limit {1 << 30})"
    )
    h[124:136] = b"\xff" * 12
    assert error(seal(h) + END) == f"{URL}: negative size in tar header at offset 0"


def test_malformed_numbers_are_named() -> None:
    h = header(b"k.jpg", 0)
    h[124:136] = b"12x4567890123"[:12]
    assert error(seal(h) + END) == (
        f"{URL}: malformed number b'12x456789012' in tar header at offset 0"
    )
    h2 = header(b"k.jpg", 0)
    h2[124:136] = b"9" * 11 + b"\0"
    assert error(member(b"a.cls", b"1") + seal(h2) + END) == (
        f"{URL}: malformed number b'99999999999' in tar header at offset 1024"
    )


# --- checksums ------------------------------------------------------------------------------
def test_checksum_formats_other_writers_use() -> None:
    for field in (b"{}\0", b"{} ", b" {}\0", b"0{}\0 ", b"%07o "):  # the last: no NUL at all
        tar = seal(header(b"k.txt", 2), field=field) + b"hi" + bytes(510) + END
        assert read(tar) == [("k", {"txt": b"hi"})], field


def test_signed_checksums_of_old_tars() -> None:
    name = b"k\x7f\x80\xff.txt"  # DEL and three high bytes: signed and unsigned sums differ
    tar = seal(header(name, 2), signed=True) + b"hi" + bytes(510) + END
    assert read(tar) == [("k\x7f\udc80\udcff", {"txt": b"hi"})]
    wrong = bytearray(seal(header(name, 2), signed=True))
    wrong[0] = ord("j")  # the signed sum no longer matches either
    assert error(bytes(wrong) + b"hi" + bytes(510) + END) == (
        f"{URL}: bad tar header checksum at offset 0"
    )


@pytest.mark.parametrize("field", [b"garbage\0", b"\0" * 8, b"-100\0   "])
def test_unreadable_checksum_fields_are_bad_checksums(field: bytes) -> None:
    h = header(b"k.txt", 0)
    h[148:156] = field
    assert error(bytes(h) + END) == f"{URL}: bad tar header checksum at offset 0"


# --- names and keys -------------------------------------------------------------------------
def test_keys_are_cut_at_the_first_dot_of_the_file_name() -> None:
    assert split_key("a.jpg") == ("a", "jpg")
    assert split_key("dir.v2/sub.x/k01.seg.PNG") == ("dir.v2/sub.x/k01", "seg.png")
    assert split_key("a/b/c.jpg") == ("a/b/c", "jpg")
    for no_key in (".jpg", "dir/.jpg", "noext", "dir.x/noext", "dir/"):
        assert split_key(no_key) is None, no_key
    tar = b"".join(
        member(n, b"1")
        for n in (b"d.1/a.jpg", b"d.1/a.seg.png", b"x/.hidden.jpg", b"x/y/.h.jpg", b"b.cls")
    )
    assert read(tar + END) == [("d.1/a", {"jpg": b"1", "seg.png": b"1"}), ("b", {"cls": b"1"})]


def rec(key: bytes, value: bytes) -> bytes:
    """One pax record: ``LENGTH key=value\\n``, LENGTH counting itself."""
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n).encode()) + len(body) != n:
        n += 1
    return str(n).encode() + body


def test_pax_records() -> None:
    assert rec(b"size", b"7") == b"9 size=7\n" and len(rec(b"p", b"x" * 10)) == 16
    two = rec(b"path", b"a=b.jpg") + rec(b"size", b"7")
    assert _pax_records(two) == {"path": "a=b.jpg", "size": "7"}
    assert _pax_records(rec(b"path", b"\xff\xfe") + rec(b"\xffk", b"v\xfe")) == {
        "path": "\udcff\udcfe",
        "\udcffk": "v\udcfe",
    }
    three = rec(b"path", b"p.jpg") + rec(b"mtime", b"1.5") + rec(b"size", b"3")
    assert _pax_records(three) == {"path": "p.jpg", "mtime": "1.5", "size": "3"}
    assert _pax_records(b"") == {}
    assert _pax_records(b"9 size=7\nnonsense") == {"size": "7"}  # the rest is not a record
    assert _pax_records(b"x size=7\n") == {}
    assert _pax_records(b"0 size=7\n") == {}  # a zero length would never advance
    assert _pax_records(b"-3 size=7\n") == {}
    assert _pax_records(b"1 9 size=7\n") == {"": ""}  # a record of length 1 holds nothing


def test_pax_path_with_equals_and_a_malformed_record_alongside() -> None:
    records = rec(b"path", b"dir/k=1.v=2.jpg") + b"garbage"
    h = header(b"././@PaxHeader", len(records), kind=b"x")
    tar = seal(h) + records + bytes(-len(records) % BLOCK) + member(b"short.jpg", b"abc") + END
    assert read(tar) == [("dir/k=1", {"v=2.jpg": b"abc"})]


def test_malformed_extension_headers() -> None:
    big = seal(header(b"././@LongLink", (1 << 20) + 1, kind=b"L"))
    assert error(big + END) == (
        f"{URL}: oversized extended header ({(1 << 20) + 1} bytes) at offset 0"
    )
    records = rec(b"size", b"12x45")
    h = seal(header(b"././@PaxHeader", len(records), kind=b"x"))
    tar = member(b"a.cls", b"1") + h + records + bytes(-len(records) % BLOCK)
    # named at the header the pax record applies to
    assert error(tar + member(b"b.jpg", b"x") + END) == f"{URL}: bad pax size at offset 2048"
    cut = member(b"a.cls", b"1") + seal(header(b"././@LongLink", 300, kind=b"L")) + b"x" * 10
    assert error(cut) == f"{URL}: truncated extended header at offset 1024"


def test_global_pax_headers_and_gnu_long_link_names_are_not_members() -> None:
    records = rec(b"comment", b"hello")
    g = seal(header(b"pax_global_header", len(records), kind=b"g"))
    link = b"some/long/target\0"
    k = seal(header(b"././@LongLink", len(link), kind=b"K"))
    pad = lambda d: d + bytes(-len(d) % BLOCK)  # noqa: E731
    tar = g + pad(records) + k + pad(link) + member(b"a.jpg", b"abc") + END
    assert read(tar) == [("a", {"jpg": b"abc"})]
    assert [m.name for m in TarSampleReader(io.BytesIO(tar), URL).members()] == ["a.jpg"]


# --- streams --------------------------------------------------------------------------------
def test_short_reads_from_a_stream_are_completed() -> None:
    payload = bytes(range(256)) * 12
    tar = member(b"a.bin", payload) + member(b"a.cls", b"7") + member(b"b.bin", b"") + END
    want = [("a", {"bin": payload, "cls": b"7"}), ("b", {"bin": b""})]
    assert [(s.key, s.parts) for s in TarSampleReader(Trickle(tar), URL)] == want
    assert [(s.key, s.parts) for s in TarSampleReader(ReadOnly(tar), URL)] == want


def test_truncation_inside_skipped_data_names_the_member() -> None:
    tar = member(b"a.cls", b"1") + member(b"a.pkl", b"p" * 3000)
    cut = tar[: BLOCK * 2 + BLOCK + 1000]  # inside the pickle's data
    for stream in (Trickle(cut), ReadOnly(cut)):
        with pytest.raises(ShardError) as info:
            list(TarSampleReader(stream, URL, keep=lambda e: e != "pkl"))
        assert info.value.message == f"{URL}: truncated member data at offset 1024"
    with pytest.raises(ShardError) as info:
        list(TarSampleReader(Trickle(cut), URL).members())
    assert info.value.message == f"{URL}: truncated member data at offset 1024"
    with pytest.raises(ShardError) as info:
        list(TarSampleReader(Trickle(cut), URL))  # kept: read, not skipped
    assert info.value.message == f"{URL}: truncated member data at offset 1024"


def test_skip_and_count_read_headers_only() -> None:
    payload = b"z" * 40_000
    tar = b"".join(member(b"k%d.jpg" % i, payload) + member(b"k%d.cls" % i, b"1") for i in range(4))
    tar += END
    f = CountingReader(tar)
    assert count_samples(io.BufferedReader(f, buffer_size=BLOCK), URL) == 4
    assert f.bytes_read < 40_000
    f = CountingReader(tar)
    r = TarSampleReader(io.BufferedReader(f, buffer_size=BLOCK), URL, keep=lambda e: e == "cls")
    r.skip(3)
    assert f.bytes_read < 40_000
    assert [(s.key, s.parts) for s in r] == [("k3", {"cls": b"1"})]  # keep= is back after skip
    r = TarSampleReader(io.BytesIO(tar), URL)
    r.skip(0)
    assert [s.key for s in r] == ["k0", "k1", "k2", "k3"]
    with pytest.raises(ShardError) as info:
        count_samples(io.BytesIO(tar[: -1500 - 2 * BLOCK]), URL)
    assert info.value.message.startswith(f"{URL}: truncated ")


def test_lazy_extensions_need_a_lazy_reader() -> None:
    tar = member(b"a.jpg", b"abc") + END
    assert read(tar, lazy_exts=frozenset({"jpg"})) == [("a", {"jpg": b"abc"})]


def test_duplicate_members_keep_the_last_and_say_so(caplog) -> None:
    tar = member(b"a.jpg", b"one") + member(b"a.jpg", b"two") + member(b"a.cls", b"1") + END
    with caplog.at_level(logging.DEBUG, logger="wdstool.format.tar_read"):
        assert read(tar) == [("a", {"jpg": b"two", "cls": b"1"})]
    assert [r.getMessage() for r in caplog.records] == [
        f"{URL}: duplicate member a.jpg, keeping the last"
    ]


def test_observed_reader_passes_everything_on() -> None:
    tar = member(b"a.jpg", b"abc") + member(b"a.pkl", b"p") + END
    seen = []
    r = ObservedTarSampleReader(
        io.BytesIO(tar), URL, on_member=seen.append, keep=lambda e: e != "pkl"
    )
    assert [(s.key, s.parts) for s in r] == [("a", {"jpg": b"abc"})]
    assert [m.name for m in seen] == ["a.jpg", "a.pkl"]
    bad = ObservedTarSampleReader(io.BytesIO(tar[:700]), URL, on_member=seen.append)
    with pytest.raises(ShardError, match=f"^{URL}: truncated "):
        list(bad)


def test_offset_after_the_last_sample() -> None:
    tar = member(b"a.jpg", b"abc") + member(b"b.jpg", b"d") + END
    r = TarSampleReader(io.BytesIO(tar), URL)
    samples = list(r)
    assert [s.offset for s in samples] == [0, 1024]
    assert r.offset >= 2048  # past the last sample's data


def test_a_shard_cut_inside_data_that_is_seeked_over_is_truncated() -> None:
    """Seeking past the end of a file succeeds: a shard cut inside a skipped (or lazily read)
    member used to end as if complete, one sample short or with a view past its end."""
    tar = member(b"a.cls", b"1") + member(b"a.pkl", b"p" * 3000) + member(b"b.cls", b"2")
    cut = tar[:2000]  # inside the pickle's data, which is seeked over
    want = f"{URL}: truncated member data: the shard ends at offset 2000, before offset 4608"
    with pytest.raises(ShardError) as info:
        list(TarSampleReader(io.BytesIO(cut), URL, keep=lambda e: e != "pkl"))
    assert info.value.message == want
    with pytest.raises(ShardError) as info:
        count_samples(io.BytesIO(cut), URL)
    assert info.value.message == want
    with pytest.raises(ShardError) as info:  # lazily: the view would point past the end
        list(TarSampleReader(io.BytesIO(cut), URL, lazy=lambda a, n: (a, n), lazy_exts={"pkl"}))
    assert info.value.message == want
    # a reader started mid-file counts offsets from the file's start
    f = io.BytesIO(b"\0" * 100 + cut)
    f.seek(100)
    with pytest.raises(ShardError) as info:
        list(TarSampleReader(f, URL, start_offset=0, keep=lambda e: e != "pkl"))
    assert info.value.message == want
    rel = io.BytesIO(cut[1024:])
    with pytest.raises(ShardError) as info:
        list(TarSampleReader(rel, URL, start_offset=1024, keep=lambda e: e != "pkl"))
    assert info.value.message == want
    assert count_samples(io.BytesIO(tar + END), URL) == 2


def test_extension_header_limits_and_names() -> None:
    exact = b"k" * ((1 << 20) - 5) + b".jpg\0"  # a long name of exactly 1 MiB is accepted
    tar = seal(header(b"././@LongLink", len(exact), kind=b"L")) + exact + member(b"x", b"abc")
    assert read(tar + END) == [("k" * ((1 << 20) - 5), {"jpg": b"abc"})]
    huge_global = seal(header(b"pax_global_header", (1 << 20) + 1, kind=b"g"))
    assert error(huge_global + END) == (
        f"{URL}: oversized extended header ({(1 << 20) + 1} bytes) at offset 0"
    )
    name = b"d/k\xffn.jpg\0\0\0"  # undecodable bytes, padded with NULs
    tar = seal(header(b"././@LongLink", len(name), kind=b"L")) + name + bytes(512 - len(name))
    assert read(tar + member(b"x", b"abc") + END) == [("d/k\udcffn", {"jpg": b"abc"})]
    hundred = b"n" * 96 + b".jpg"  # a 100-byte name fills the field: no NUL after it
    assert read(member(hundred, b"abc") + END) == [("n" * 96, {"jpg": b"abc"})]


def test_member_size_limit_is_inclusive() -> None:
    assert read(member(b"a.bin", b"x" * 10) + END, max_member_size=10) == [
        ("a", {"bin": b"x" * 10})
    ]
    assert error(member(b"a.bin", b"x" * 11) + END, max_member_size=10) == (
        f"{URL}: member at offset 0 declares 11 bytes (limit 10)"
    )


def test_offset_before_reading_is_the_start_offset() -> None:
    assert TarSampleReader(io.BytesIO(b""), URL, start_offset=7168).offset == 7168


@pytest.mark.parametrize(
    ("where", "cut", "keep", "lazy"),
    [
        ("padding of a kept member", 1024 + 512 + 300 + 50, None, False),
        ("a keyless member", 512 + 50, None, False),
        ("a lazy member", 1024 + 512 + 50, None, True),
        ("the padding of a long name", 1024 + 512 + 400, None, False),
    ],
)
def test_truncated_streams_name_the_member(where: str, cut: int, keep, lazy: bool) -> None:
    long_name = b"k" * 300 + b".jpg\0"
    first = member(b"noext", b"z" * 600) if where == "a keyless member" else member(b"a.cls", b"1")
    if where == "the padding of a long name":
        second = seal(header(b"././@LongLink", len(long_name), kind=b"L")) + long_name
        second += bytes(-len(long_name) % BLOCK) + member(b"x", b"abc")
    else:
        second = member(b"a.jpg", b"j" * 300)
    tar = first + second + END
    kw = {"lazy": lambda a, n: (a, n), "lazy_exts": frozenset({"jpg"})} if lazy else {}
    with pytest.raises(ShardError) as info:
        list(TarSampleReader(Trickle(tar[:cut]), URL, **kw))
    offset = 0 if where == "a keyless member" else 1024
    assert info.value.message == f"{URL}: truncated member data at offset {offset}", where
