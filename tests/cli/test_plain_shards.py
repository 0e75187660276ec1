"""The first commands on someone else's shards: a tar written by upstream webdataset, with no
index.json, named by a relative path (a single tar, a folder of them, a tar in a folder) from
the folder the user stands in. inspect, verify and index --dali read them, or name the real
cause in one line; nothing is resolved against the root of the file system."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import webdataset as wds
from click.testing import CliRunner
from PIL import Image

from wdstool.cli import cli


def _jpeg(i: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 24), (40 * i % 256, 80, 120)).save(out, "JPEG")
    return out.getvalue()


def write_plain(path: Path, n: int = 4) -> Path:
    """A shard as upstream webdataset's TarWriter writes it: __key__, jpg, txt; no index."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with wds.TarWriter(str(path)) as w:
        for i in range(n):
            w.write({"__key__": f"s{i:04d}", "jpg": _jpeg(i), "txt": f"caption {i}"})
    return path


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder holding first_plain.tar, one/first_plain.tar and p3/first_plain.tar."""
    write_plain(tmp_path / "first_plain.tar")
    write_plain(tmp_path / "one" / "first_plain.tar")
    write_plain(tmp_path / "p3" / "first_plain.tar")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def wdstool(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("source", ["first_plain.tar", "one", "p3/first_plain.tar", "./one/"])
def test_verify_reads_relative_plain_shards(here: Path, source: str) -> None:
    r = wdstool("verify", "-q", source)
    assert r.exit_code == 0, r.output
    assert "ok: 1 shards, 4 samples" in r.output


@pytest.mark.parametrize("source", ["first_plain.tar", "one", "p3/first_plain.tar"])
def test_inspect_reads_relative_plain_shards(here: Path, source: str) -> None:
    r = wdstool("inspect", "--json", source)
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["num_samples"] == 4 and info["sample_keys"][:2] == ["s0000", "s0001"]
    assert not info["shards"][0]["url"].startswith("/")


def test_verify_of_a_missing_tar_names_it_without_a_manifest(here: Path) -> None:
    r = wdstool("verify", "-q", "p3/nope.tar")
    assert r.exit_code != 0
    line = r.stderr.strip()
    assert line == "Error: p3/nope.tar: shard not found", line


@pytest.mark.parametrize(
    ("source", "idx"),
    [("one", "one/first_plain.idx"), ("first_plain.tar", "first_plain.idx")],
)
def test_dali_index_of_plain_shards(here: Path, source: str, idx: str) -> None:
    r = wdstool("index", "--dali", "-q", source)
    assert r.exit_code == 0, r.output
    lines = (here / idx).read_text().splitlines()
    assert lines[0] == "v1.2 4" and len(lines) == 1 + 4
    assert lines[1].startswith("jpg ") and lines[1].endswith(" s0000.txt")


def test_dali_index_under_out_of_plain_shards(here: Path) -> None:
    r = wdstool("index", "--dali", "-q", "p3/first_plain.tar", "--out", "idx")
    assert r.exit_code == 0, r.output
    assert (here / "idx" / "first_plain.idx").is_file()
