"""reshard of SRCs that disagree on members (one labelled, one not; captions in one only) is
refused in one line naming the SRCs, unless --allow-mixed-members; --dedupe keeps the first
copy in SRC order, with that copy's members (documented in its --help)."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest
import webdataset as wds
from click.testing import CliRunner
from PIL import Image

from shard_writer import ReshardOptions, reshard
from wdstool.base.errors import InputError
from wdstool.cli import cli


def _jpeg(i: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 24), (40 * i % 256, 80, 120)).save(out, "JPEG")
    return out.getvalue()


def write_tar(path: Path, prefix: str, *, cls: bool = False, txt: bool = False) -> Path:
    """Four samples (the same four images whatever ``prefix``), as webdataset writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with wds.TarWriter(str(path)) as w:
        for i in range(4):
            sample = {"__key__": f"{prefix}{i:04d}", "jpg": _jpeg(i)}
            if cls:
                sample["cls"] = i % 2
            if txt:
                sample["txt"] = f"caption {i}"
            w.write(sample)
    return path


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write_tar(tmp_path / "lab" / "lab.tar", "l", cls=True)
    write_tar(tmp_path / "plain" / "plain.tar", "p", txt=True)
    write_tar(tmp_path / "both" / "both.tar", "b", cls=True, txt=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def wdstool(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def members(dest: Path) -> list[str]:
    manifest = json.loads((dest / "index.json").read_text())
    out = []
    for entry in manifest["shardlist"]:
        with tarfile.open(dest / entry["url"]) as tar:
            out += tar.getnames()
    return out


def test_labelled_and_unlabelled_srcs_are_refused_in_one_line(here: Path) -> None:
    r = wdstool("reshard", "-q", "lab", "plain", "out")
    assert r.exit_code != 0
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith("Error: ")
    assert ".cls (labels) in lab, not in plain" in line
    assert ".txt (captions) in plain, not in lab" in line
    assert "--allow-mixed-members" in line
    assert not (here / "out").exists()


@pytest.mark.parametrize(
    ("srcs", "said"),
    [
        (["lab", "both"], ".txt (captions) in both, not in lab"),
        (["both", "plain"], ".cls (labels) in both, not in plain"),
    ],
)
def test_a_member_one_src_lacks_is_named(here: Path, srcs: list[str], said: str) -> None:
    with pytest.raises(InputError, match=re.escape(said)):
        reshard(srcs, "out", ReshardOptions(workers=1))


def test_allow_mixed_members_merges_them(here: Path) -> None:
    r = wdstool("reshard", "-q", "lab", "plain", "out", "--allow-mixed-members")
    assert r.exit_code == 0, r.output
    names = members(here / "out")
    assert sum(n.endswith(".cls") for n in names) == 4
    assert sum(n.endswith(".txt") for n in names) == 4


@pytest.mark.parametrize(("first", "kept"), [("lab", ".cls"), ("plain", ".txt")])
def test_dedupe_keeps_the_first_copy_in_src_order(here: Path, first: str, kept: str) -> None:
    """The same four images in both SRCs: the copies of the SRC listed first stay, with their
    members; the others are listed in index.json 'skipped'."""
    other = "plain" if first == "lab" else "lab"
    r = wdstool("reshard", "-q", first, other, "out", "--dedupe", "--allow-mixed-members")
    assert r.exit_code == 0, r.output
    names = members(here / "out")
    assert len(names) == 8 and sum(n.endswith(kept) for n in names) == 4
    skipped = json.loads((here / "out" / "index.json").read_text())["skipped"]
    assert len(skipped) == 4 and all("duplicate image" in s["reason"] for s in skipped)


def test_dedupe_help_says_which_copy_is_kept() -> None:
    r = wdstool("reshard", "--help")
    text = " ".join(r.output.split())
    assert "the first in SRC order" in text and "--allow-mixed-members" in text


def test_append_compares_with_the_data_set_in_dest(here: Path) -> None:
    reshard(["lab"], "out", ReshardOptions(workers=1))
    with pytest.raises(InputError, match=r"\.cls \(labels\) in .*out.*, not in plain"):
        reshard(["plain"], "out", ReshardOptions(workers=1, append=True))
    assert len(json.loads((here / "out" / "index.json").read_text())["shardlist"]) == 1


def test_members_are_named_before_colliding_keys(here: Path) -> None:
    """The same keys in an unlabelled copy of a labelled SRC: the members are the question
    (whether to merge at all), asked before the keys."""
    write_tar(here / "same" / "same.tar", "l", txt=True)
    r = wdstool("reshard", "-q", "lab", "same", "out")
    assert r.exit_code != 0 and ".cls (labels) in lab, not in same" in r.stderr
