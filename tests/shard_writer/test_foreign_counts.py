"""`wdstool index SOURCE --out DIR` on shards in img2dataset's layout (tar + parquet +
_stats.json per shard, tests/support/img2dataset.py), on disk: counts and keys from the side
files equal a header scan's; a shard whose side files lie is named; shards without side files
are scanned; a run killed part way goes on where it stopped; the side file is written from
SIDE_MIN_SHARDS shards; make_loader over the index gives exact epochs over 2 ranks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shard_writer.count_parts as count_parts
from loaders import make_loader
from shard_writer.foreign_count import CountBy
from shard_writer.index_folder import IndexOptions, write_index_folder
from tests.conftest import run_cli
from tests.support.img2dataset import write_shards
from wdstool.base.errors import ShardError
from wdstool.format.img2dataset import read_side
from wdstool.format.manifest import parse_manifest
from wdstool.format.shard_table import SIDE_NAME
from wdstool.format.tar_index import sample_spans


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    folder = tmp_path_factory.mktemp("i2d") / "shards"
    return folder, write_shards(folder, shards=5, per_shard=240, failed=0.15, seed=1)


def _read(url: str, a: int, b: int) -> bytes:
    with open(url, "rb") as f:
        f.seek(a)
        return f.read(b - a)


def _manifest(out: Path):
    return parse_manifest((out / "index.json").read_bytes(), str(out))


def test_side_files_give_the_keys_a_header_scan_gives(shards) -> None:
    folder, keys = shards
    for name, want in keys.items():
        tar = folder / name
        parquet = tar.with_suffix(".parquet")
        stats = (folder / f"{tar.stem}_stats.json").read_bytes()
        side = read_side(str(tar), parquet.stat().st_size, _read, stats)
        with open(tar, "rb") as f:
            scanned = [s.key for s in sample_spans(f, str(tar))]
        assert list(side.keys) == scanned == want
        assert pq.ParquetFile(parquet).metadata.num_row_groups == 3  # img2dataset: 100 rows each


def test_the_index_counts_as_a_scan_does(shards, tmp_path: Path) -> None:
    folder, keys = shards
    by_side = write_index_folder([str(folder)], str(tmp_path / "side"), IndexOptions(check=2))
    by_scan = write_index_folder(
        [str(folder)], str(tmp_path / "scan"), IndexOptions(count_by=CountBy.SCAN, batch=2)
    )
    assert by_side["counted_by"] == {"side_files": 5, "headers": 0} and by_side["checked"] == 2
    assert by_scan["counted_by"] == {"side_files": 0, "headers": 5}
    a, b = _manifest(tmp_path / "side"), _manifest(tmp_path / "scan")
    assert [s[:3] for s in a.shards] == [s[:3] for s in b.shards]
    assert [s.nsamples for s in a.shards] == [len(k) for k in keys.values()]
    assert all(s.filesize == (folder / Path(s.url).name).stat().st_size for s in a.shards)
    assert a.fingerprint == b.fingerprint  # the same shards and counts, however counted
    # the scan recorded each sample's offset; the side files' index only the checked ones'
    assert b.sample_offsets is not None and b.sample_offsets.samples == b.num_samples
    assert not (tmp_path / "side" / ".wdstool-index").exists()  # the work folder is gone


def _lie(folder: Path, stem: str, drop: int = 1) -> None:
    """Rewrite a shard's parquet and stats as if ``drop`` downloads more had failed."""
    path = folder / f"{stem}.parquet"
    rows = pq.read_table(path).to_pylist()
    ok = [i for i, r in enumerate(rows) if r["status"] == "success"]
    for i in ok[:drop]:
        rows[i]["status"] = "failed_to_download"
    pq.write_table(pa.Table.from_pylist(rows), path)
    stats = json.loads((folder / f"{stem}_stats.json").read_text())
    stats["successes"] -= drop
    (folder / f"{stem}_stats.json").write_text(json.dumps(stats))


def test_a_shard_whose_side_files_lie_is_named(shards, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(shards[0], folder)
    _lie(folder, "00003")
    n = len(shards[1]["00003.tar"])
    with pytest.raises(
        ShardError,
        match=r"00003\.tar: its side files are not this tar's: .*"
        rf"00003\.parquet lists {n - 1} samples, the tar holds {n} \(key '000030",
    ):
        write_index_folder([str(folder)], str(tmp_path / "out"), IndexOptions(check=-1))
    assert not (tmp_path / "out" / "index.json").exists()
    # the stats file and the parquet disagree: named without reading any tar
    stats = json.loads((folder / "00001_stats.json").read_text())
    stats["successes"] += 1
    (folder / "00001_stats.json").write_text(json.dumps(stats))
    with pytest.raises(
        ShardError,
        match=r"00001\.tar: its side files disagree: .*00001_stats"
        r"\.json says \d+ samples, .*00001\.parquet lists \d+ successes",
    ):
        write_index_folder([str(folder)], str(tmp_path / "out"), IndexOptions(check=0))
    r = run_cli("index", str(folder), "--out", str(tmp_path / "out"), "--check", "0", check=False)
    assert r.returncode == 1 and "00001.tar: its side files disagree" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_shards_without_side_files_are_scanned(shards, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(shards[0], folder)
    (folder / "00002.parquet").unlink()
    got = write_index_folder([str(folder)], str(tmp_path / "auto"), IndexOptions(check=0))
    assert got["counted_by"] == {"side_files": 4, "headers": 1}
    m = _manifest(tmp_path / "auto")
    assert [s.nsamples for s in m.shards] == [len(k) for k in shards[1].values()]
    with pytest.raises(ShardError, match=r"00002\.tar: no 00002\.parquet beside it"):
        write_index_folder(
            [str(folder)], str(tmp_path / "strict"), IndexOptions(count_by=CountBy.SIDE)
        )


def test_a_killed_run_goes_on_where_it_stopped(
    shards, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, counted = tmp_path / "out", []
    real = count_parts._count

    def counting(batch):
        counted.append(batch.index)
        return real(batch)

    monkeypatch.setattr(count_parts, "_count", counting)

    def killed(done: int, total: int) -> None:
        if done >= 2:
            raise KeyboardInterrupt  # as a Ctrl-C, or a node lost, after two parts

    options = IndexOptions(batch=1, workers=1, check=0)
    with pytest.raises(KeyboardInterrupt):
        write_index_folder([str(shards[0])], str(out), options, progress=killed)
    assert not (out / "index.json").exists() and len(list((out / ".wdstool-index").iterdir())) == 2
    first = list(counted)
    counted.clear()
    seen: list[tuple[int, int]] = []
    got = write_index_folder(
        [str(shards[0])], str(out), options, progress=lambda d, t: seen.append((d, t))
    )
    assert sorted(counted) == sorted(set(range(5)) - set(first[:2]))  # the rest, only
    assert seen[0] == (2, 5) and seen[-1] == (5, 5)
    assert got["num_samples"] == sum(len(k) for k in shards[1].values())


def test_a_large_index_gets_the_side_file(
    shards, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wdstool.format.shard_table as shard_table

    monkeypatch.setattr(shard_table, "SIDE_MIN_SHARDS", 5)
    got = write_index_folder([str(shards[0])], str(tmp_path / "out"), IndexOptions(check=0))
    assert set(got["files"]) == {"index.json", SIDE_NAME}
    assert got["files"][SIDE_NAME] == (tmp_path / "out" / SIDE_NAME).stat().st_size


@pytest.mark.parametrize("split", ["shards", "samples"])
def test_make_loader_over_the_index_gives_exact_epochs_over_two_ranks(
    shards, tmp_path: Path, split: str
) -> None:
    """Every sample exactly once an epoch (uneven="mask"), the same steps on both ranks; with
    split="shards" no shard is read by both (keys start with their shard's number)."""
    out = tmp_path / "out"
    write_index_folder([str(shards[0])], str(out), IndexOptions(check=0))
    want = sorted(k for keys in shards[1].values() for k in keys)
    kw = {"label": None, "image_size": 16, "uneven": "mask", "split": split, "num_workers": 0}
    ranks = [make_loader(out, 16, rank=r, world_size=2, seed=4, **kw) for r in range(2)]
    for epoch in (0, 1):
        got = []
        for loader in ranks:
            loader.set_epoch(epoch)
            batches = list(loader)
            assert len(batches) == len(ranks[0])  # equal steps
            keys = [k for b in batches for k, v in zip(b["keys"], b["valid"], strict=True) if v]
            got.append({k[:5] for k in keys})
            got.append(keys)
        assert sorted(got[1] + got[3]) == want  # every sample exactly once
        if split == "shards":
            assert not got[0] & got[2] and got[0] | got[2] == {f"{s:05d}" for s in range(5)}


def test_the_cli_states_what_it_wrote(shards, tmp_path: Path) -> None:
    r = run_cli("index", str(shards[0]), "--out", str(tmp_path / "out"), "--json", "-q")
    summary = json.loads(r.stdout)
    assert summary["num_shards"] == 5 and summary["counted_by"]["side_files"] == 5
    assert summary["files"]["index.json"] == (tmp_path / "out" / "index.json").stat().st_size
    human = run_cli("index", str(shards[0]), "--out", str(tmp_path / "h"), "-q").stdout
    assert "5 shards" in human and "index.json:" in human
    assert np.isclose(summary["num_samples"], sum(len(k) for k in shards[1].values()))
