"""The ranged shard file ``wdstool show`` walks: a file object as the tar reader expects."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from wdstool.base.errors import ShardError
from wdstool.format.tar_read import TarSampleReader
from wdstool.format.tar_write import END, write_member
from wdstool.show.ranged import ReadCounter, ShardFile


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    for name, data in members:
        write_member(buf.write, name, data)
    buf.write(END)
    return buf.getvalue()


def test_seek_from_the_end_is_from_the_shards_size(tmp_path: Path) -> None:
    path = tmp_path / "a.tar"
    path.write_bytes(b"x" * 5000)
    with ShardFile(str(path), 5000, ReadCounter(), readahead=0) as f:
        assert f.seek(0, os.SEEK_END) == 5000
        assert f.seek(-10, os.SEEK_END) == 4990
        assert f.read(4) == b"xxxx" and f.tell() == 4994
        assert f.seek(6, os.SEEK_CUR) == 5000 and f.read() == b""


def test_a_shard_cut_inside_its_last_members_data_is_truncated(tmp_path: Path) -> None:
    """The reader seeks past member data; at the end it checks the file reached that offset
    (``seek(0, SEEK_END)``): a shard cut short is named truncated, not read as a short image."""
    whole = _tar([("a.cls", b"1"), ("a.jpg", os.urandom(3000))])
    cut = whole[: 512 + 512 + 512 + 1000]  # a.cls block, a.jpg header, 1000 of its 3000 bytes
    path = tmp_path / "cut.tar"
    path.write_bytes(cut)
    f = ShardFile(str(path), len(cut), ReadCounter(), readahead=0)
    with f, pytest.raises(ShardError, match="truncated member data"):
        list(TarSampleReader(f, str(path)).members())
    f = ShardFile(str(path), len(whole), ReadCounter(), readahead=0)  # listed too long
    with f, pytest.raises(ShardError, match="shorter than"):
        list(TarSampleReader(f, str(path)).members())
