"""Which tar members are unsafe to extract: the pure rule, the writer refusing, and the observed
reader showing every member with the name the tar format gives it."""

from __future__ import annotations

import io
import tarfile

import pytest

from tests.conftest import jpeg_bytes
from tests.support.tars import add, sample
from tests.support.unsafe_shards import KINDS, LONG_DIR, NON_UTF8, USTAR_SPLIT
from wdstool.format.tar_read import ObservedTarSampleReader, TarMember, TarSampleReader
from wdstool.format.tar_safety import printable_name, unsafe_reasons
from wdstool.format.tar_write import END, header, write_member


@pytest.mark.parametrize(
    ("name", "kind", "reasons"),
    [
        ("000000001_cat.jpg", b"0", ()),
        ("dir/sub/key.tar.gz", b"0", ()),
        ("a..b/..c/d..", b"0", ()),  # dots inside a component are not a parent reference
        ("./key.jpg", b"0", ()),
        ("folder/", b"5", ()),
        ("ünïcödé/画像.jpg", b"0", ()),
        ("/etc/passwd", b"0", ("absolute name",)),
        ("../key.jpg", b"0", ("'..' in the path",)),
        ("a/b/../../../key.jpg", b"7", ("'..' in the path",)),
        ("key/..", b"0", ("'..' in the path",)),
        ("..", b"5", ("'..' in the path",)),
        ("link.jpg", b"2", ("symlink",)),
        ("hard.jpg", b"1", ("hard link",)),
        ("tty", b"3", ("character device",)),
        ("sda", b"4", ("block device",)),
        ("pipe", b"6", ("FIFO",)),
        (NON_UTF8 + ".jpg", b"0", ("name is not valid UTF-8",)),
        ("/../x", b"2", ("symlink", "absolute name", "'..' in the path")),
    ],
)
def test_unsafe_reasons(name: str, kind: bytes, reasons: tuple[str, ...]) -> None:
    assert unsafe_reasons(name, kind) == reasons


def test_printable_name_escapes_bytes_and_control_characters() -> None:
    assert printable_name("caf\udce9.jpg") == "caf\\xe9.jpg"
    assert printable_name("new\nline\x1b[31m.jpg") == "new\\nline\\x1b[31m.jpg"
    assert printable_name("画像 ok.jpg") == "画像 ok.jpg"
    assert printable_name("\ud800") == "\\ud800"  # a surrogate no byte decodes to


@pytest.mark.parametrize("name", ["../key.jpg", "/abs/key.jpg", "a/../../b.cls", "..", "x/.."])
def test_writer_refuses_unsafe_names(name: str) -> None:
    written: list[bytes] = []
    with pytest.raises(ValueError, match="refusing tar member"):
        write_member(written.append, name, b"data")
    assert written == []  # nothing half-written
    with pytest.raises(ValueError):
        header(name, 4)


def test_writer_still_writes_safe_names() -> None:
    buf = io.BytesIO()
    write_member(buf.write, "000000001_a..b.jpg", b"data")
    buf.write(END)
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tf:
        [m] = tf.getmembers()
        assert m.name == "000000001_a..b.jpg" and m.isreg() and tf.extractfile(m).read() == b"data"


def _hostile_tar(fmt: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(
        fileobj=buf, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape"
    ) as tf:
        sample(tf, "s0", 1)
        for plant, _, kind_fmt in KINDS.values():
            if kind_fmt == fmt:
                plant(tf)
        # a symlink whose target needs a GNU long link name (K) or a pax linkpath record
        target = "/" + "t" * (150 if fmt != tarfile.USTAR_FORMAT else 50)
        add(tf, "longlink.jpg", kind=tarfile.SYMTYPE, linkname=target)
        add(tf, "dir", kind=tarfile.DIRTYPE)
        sample(tf, "s1", 2)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_observed_reader_shows_every_member_as_tar_resolves_it(fmt: int) -> None:
    data = _hostile_tar(fmt)
    seen: list[TarMember] = []
    reader = ObservedTarSampleReader(io.BytesIO(data), "mem.tar", on_member=seen.append)
    samples = [(s.key, s.parts) for s in reader]
    plain = [(s.key, s.parts) for s in TarSampleReader(io.BytesIO(data), "mem.tar")]
    assert samples == plain and [k for k, _ in samples] == ["s0", "s1"]
    assert samples[0][1]["jpg"] == jpeg_bytes(1)
    with tarfile.open(fileobj=io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as tf:
        want = [(m.name, m.type, m.offset) for m in tf.getmembers()]
    # tarfile drops a trailing "/" of folder names; so does our comparison
    assert [(m.name.rstrip("/"), m.kind, m.offset) for m in seen] == want
    flagged = {m.name for m in seen if unsafe_reasons(m.name, m.kind)}
    expected = {name for _, name, kind_fmt in KINDS.values() if kind_fmt == fmt}
    expected = {n.replace("caf\\xe9-\\xff", NON_UTF8) for n in expected} | {"longlink.jpg"}
    assert flagged == expected
    hidden = {
        tarfile.GNU_FORMAT: f"{LONG_DIR}/../../evil",  # the L record, not the cut ustar field
        tarfile.PAX_FORMAT: "x/../../evil",  # the pax path, not the ustar field "evil"
        tarfile.USTAR_FORMAT: USTAR_SPLIT,  # the prefix field joined to the name field
    }
    assert hidden[fmt] in flagged
