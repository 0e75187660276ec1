"""pack never writes a member that is unsafe to extract, whatever the source file names are:
keys are sanitised (layout.sample_key) and the tar writer refuses unsafe names anyway."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from shard_writer.layout import sample_key
from shard_writer.pack import PackOptions, pack
from shard_writer.scan import SourceFile
from tests.conftest import jpeg_bytes, run_cli
from wdstool.format.tar_safety import unsafe_reasons
from wdstool.format.tar_write import header

HOSTILE = [
    "..jpg",
    "...jpg",
    "a..b.jpg",
    ".. ..jpg",
    " leading and trailing spaces .jpg",
    "trailing dots....jpg",
    "-dash-.jpg",
    "ünïcödé 画像 🐱.jpg",
    os.fsdecode(b"caf\xe9-\xff.jpg"),  # undecodable bytes (surrogate escapes on POSIX)
    "new\nline\ttab.jpg",
    "back\\..\\slash.jpg",
    "x" * 240 + ".jpg",
    "é" * 120 + ".jpg",  # 244 bytes
    "....../..jpg",  # a folder named "......" holding "..jpg"
    ".../etc/passwd.jpg",
]


def _hostile_tree(root: Path) -> int:
    n = 0
    for cls in ("cat", "dög ünï"):
        for name in HOSTILE:
            path = root / cls / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(jpeg_bytes(n))
            n += 1
    return n


def test_pack_of_hostile_file_names_writes_only_safe_members(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "ds"
    n = _hostile_tree(src)
    pack(str(src), str(dest), PackOptions(workers=1, max_count=7))
    manifest = json.loads((dest / "index.json").read_text())
    assert manifest["num_samples"] == n and manifest["skipped"] == []
    names: list[str] = []
    for entry in manifest["shardlist"]:
        shard = dest / entry["url"]
        # an independent parser, seeing undecodable bytes as they are stored
        with tarfile.open(shard, encoding="utf-8", errors="surrogateescape") as tf:
            members = tf.getmembers()
            for m in members:
                assert m.isreg(), m.name
                assert unsafe_reasons(m.name, m.type) == (), m.name
                assert not m.name.startswith("/") and ".." not in m.name.split("/")
                assert m.name.isascii() and m.name.isprintable()
            out = tmp_path / "x" / entry["url"]
            tf.extractall(out, filter="data")  # refuses anything that would leave ``out``
        # every member lands as a plain file right in ``out``: no folder, nothing elsewhere
        assert sorted(p.name for p in out.iterdir()) == sorted(m.name for m in members)
        assert all(p.is_file() and not p.is_symlink() for p in out.iterdir())
        names += [m.name for m in members]
    assert len(names) == 3 * n and len(set(names)) == 3 * n
    # what is readable and safe in a file name survives in its key
    stems = {name.split("_", 1)[1].rsplit(".", 1)[0] for name in names if "_" in name}
    assert {"a_b", "leading_and_trailing_spaces", "caf_-", "passwd", "x" * 40} <= stems
    r = run_cli("verify", str(dest), check=False)
    assert r.returncode == 0 and r.stderr == "", r.stderr


_PIECES = st.sampled_from(["/", ".", "..", "../", "/..", " ", "\\", "\n", "é", "\udce9", "x"])
_ANY = st.text(st.characters(exclude_categories=()), max_size=12)  # surrogates included


@given(
    relpath=st.lists(st.one_of(_PIECES, _ANY), max_size=40).map("".join),
    index=st.integers(0, 10**12),
)
def test_every_sample_key_makes_safe_member_names(relpath: str, index: int) -> None:
    key = sample_key(SourceFile(index=index, relpath=relpath, class_idx=0, size=0))
    for ext in ("jpg", "cls", "json", "webp"):
        name = f"{key}.{ext}"
        assert unsafe_reasons(name) == ()
        header(name, 10)  # the writer accepts it: ASCII, 1..100 bytes, safe
