"""`wdstool pack` of a whole Hub split: Parquet files written by `datasets` itself (4 train files,
1 test file), from a folder (`#train`, `--split`), a glob, `hf://datasets/...` over the loopback
web server and an `s3://` prefix; keys unique across the files and equal to the loader's
(`row_key(prefix, row)`), the images byte for byte, one-line errors for an unnamed split and
for files whose columns differ, the shuffle by (file, row group)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import dir_bytes, run_cli
from tests.support.parquet import CLASSES, hub_split
from tests.support.tar_reference import dataset_samples
from tests.support.webserver import WebServer
from wdstool.format.parquet_files import list_parquet
from wdstool.format.parquet_rows import key_prefixes, row_key

SIZE = (40, 56)
ROWS, GROUP = 100, 50  # rows a file, rows a row group: 2 row groups a file


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, list[dict]]:
    """A Hub repository's layout: data/train-0000{0..3}-of-00004.parquet (100 rows each) and
    data/test-00000-of-00001.parquet (40 rows); the train rows in file order, then row order."""
    root = tmp_path_factory.mktemp("repo")
    rows = hub_split(root, "train", files=4, rows=ROWS, group=GROUP, size=SIZE)
    hub_split(root, "test", files=1, rows=40, group=GROUP, seed=7, size=SIZE)
    return root, rows


def _pack(src: str, dest: Path, *args: str, **kw) -> dict:
    out = run_cli("pack", src, str(dest), "--workers", "1", "--json", *args, **kw)
    return json.loads(out.stdout)


def _samples(dest: Path) -> dict[str, dict[str, bytes]]:
    got: dict[str, dict[str, bytes]] = {}
    for key, members in dataset_samples(dest):
        assert key not in got, f"duplicate key {key}"
        got[key] = dict(members)
    return got


def _tars(dest: Path) -> dict[str, bytes]:
    return {k: v for k, v in dir_bytes(dest).items() if k.endswith(".tar")}


def _one_line_error(src: str, dest: Path, *args: str, code: int = 1) -> str:
    r = run_cli("pack", src, str(dest), "--workers", "1", *args, check=False)
    assert r.returncode == code, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: "), r.stderr
    assert not dest.exists() or not list(dest.glob("*.tar"))
    return r.stderr.strip()


def test_a_split_packs_whole_under_the_loaders_keys(repo, tmp_path: Path) -> None:
    root, rows = repo
    out = _pack(f"{root}#train", tmp_path / "ds", "--max-count", "64")
    assert out["samples"] == 400 and out["classes"] == len(CLASSES)
    assert json.loads((tmp_path / "ds" / "index.json").read_text())["classes"] == list(CLASSES)
    got = _samples(tmp_path / "ds")
    assert len(got) == 400  # unique across the files: each file's rows are keyed 000000...
    # the loader's keys: each file's prefix (from the sorted URLs list_parquet gives) and row
    urls = [o.url for o in list_parquet(f"{root}#train")]
    expected = [
        row_key(prefix, r) for prefix in key_prefixes(urls) for r in range(ROWS)
    ]  # file order, then row order: as `rows`
    assert sorted(got) == sorted(expected) == sorted(r["key"] for r in rows)
    for key, row in zip(expected, rows, strict=True):
        sample = got[key]
        assert sample[".jpg"] == row["image"]  # the bytes in the file, untouched
        assert sample[".cls"] == str(row["label"]).encode()
        meta = json.loads(sample[".json"])
        assert meta["text"] == row["text"] and meta["class"] == CLASSES[row["label"]]
    # --split NAME is SRC#NAME: the same shards from the data folder
    _pack(f"{root}/data", tmp_path / "named", "--max-count", "64", "--split", "train")
    assert _tars(tmp_path / "named") == _tars(tmp_path / "ds")


def test_a_source_of_several_splits_needs_one_named(repo, tmp_path: Path) -> None:
    root, _ = repo
    msg = _one_line_error(str(root), tmp_path / "x")
    assert f"{root}: holds the splits test, train: name one" in msg, msg
    assert "holds the splits test, train" in _one_line_error(f"{root}/data", tmp_path / "x")
    msg = _one_line_error(str(root), tmp_path / "x", "--split", "valid")
    assert "no files of split 'valid' (splits: test, train)" in msg, msg
    msg = _one_line_error(f"{root}#train", tmp_path / "x", "--split", "test", code=2)
    assert "--split 'test' and #train name different splits" in msg, msg
    out = _pack(f"{root}#test", tmp_path / "test")
    assert out["samples"] == 40
    assert {k.rsplit("-", 1)[0] for k in _samples(tmp_path / "test")} == {"test-00000-of-00001"}


def test_a_glob_in_file_order_then_row_order(repo, tmp_path: Path) -> None:
    """--no-shuffle keeps file order, then row order; the shuffle permutes the (file, row
    group) pairs and the rows within each, so each pair's rows stay together."""
    root, rows = repo
    glob = f"{root}/data/train-*.parquet"
    _pack(glob, tmp_path / "plain", "--no-shuffle", "--max-count", "64")
    order = [k for k, _ in dataset_samples(tmp_path / "plain")]
    assert order == [r["key"] for r in rows]
    _pack(glob, tmp_path / "mixed", "--max-count", "64", "--seed", "3")
    order = [k for k, _ in dataset_samples(tmp_path / "mixed")]
    pairs = [(k.rsplit("-", 1)[0], int(k.rsplit("-", 1)[1]) // GROUP) for k in order]
    runs = [p for i, p in enumerate(pairs) if i == 0 or p != pairs[i - 1]]
    assert sorted(runs) == sorted(set(pairs)) and len(runs) == 8  # each pair once, whole
    assert runs != sorted(runs)
    within = [[n for n, p in zip(order, pairs, strict=True) if p == run] for run in runs]
    assert all(w != sorted(w) for w in within)  # the rows of each pair shuffled too
    assert sorted(order) == sorted(r["key"] for r in rows)


def test_a_hub_repository_over_its_tree_api(repo, tmp_path: Path, monkeypatch) -> None:
    root, _ = repo
    _pack(f"{root}#train", tmp_path / "local", "--max-count", "64")
    with WebServer(root) as srv:
        monkeypatch.setenv("HF_ENDPOINT", srv.url)
        out = _pack("hf://datasets/someone/pets#train", tmp_path / "hub", "--max-count", "64")
        assert any("/api/datasets/someone/pets/tree/" in p for _m, p, _r in srv.requests)
        msg = _one_line_error("hf://datasets/someone/pets", tmp_path / "x")
        assert "holds the splits test, train: name one" in msg, msg
    assert out["samples"] == 400
    assert _tars(tmp_path / "hub") == _tars(tmp_path / "local")  # the same keys and bytes


@pytest.mark.slow
def test_an_s3_prefix(repo, tmp_path: Path, s3_server, s3_bucket: str) -> None:
    root, rows = repo
    client = s3_server.client()
    for f in sorted((root / "data").glob("*.parquet")):
        client.put_object(Bucket=s3_bucket, Key=f"pets/data/{f.name}", Body=f.read_bytes())
    env = {k: v for k, v in s3_server.env.items() if k != "AWS_ENDPOINT_URL"}
    out = _pack(
        f"s3://{s3_bucket}/pets/data/#train",
        tmp_path / "s3",
        "--no-shuffle",
        "--endpoint-url",
        s3_server.endpoint_url,
        env=env,
    )
    assert out["samples"] == 400
    assert [k for k, _ in dataset_samples(tmp_path / "s3")] == [r["key"] for r in rows]


def test_files_with_other_columns_are_one_line_errors(tmp_path: Path) -> None:
    import datasets

    from tests.conftest import jpeg_bytes

    hub_split(tmp_path / "odd", "train", files=2, rows=6, group=6, size=SIZE)
    odd = tmp_path / "odd" / "data" / "train-00001-of-00002.parquet"
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=list(CLASSES))}
    )
    datasets.Dataset.from_dict(
        {
            "image": [{"bytes": jpeg_bytes(i, SIZE), "path": None} for i in range(6)],
            "label": [0] * 6,
        },
        features=features,
    ).to_parquet(str(odd))
    msg = _one_line_error(str(tmp_path / "odd"), tmp_path / "x")
    assert msg.startswith(f"Error: {odd}: its columns (image (Image), label (ClassLabel))"), msg
    assert "differ from the first file's" in msg
