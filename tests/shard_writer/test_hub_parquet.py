"""`wdstool pack` from Hub-style parquet: images as bytes in a column ({"bytes", "path"} structs
written by Hugging Face `datasets`, or raw bytes), labels as ClassLabel ints or names, captions,
other columns; read row group by row group; bad files are one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import dir_bytes, jpeg_bytes, png_bytes, run_cli
from tests.support.tar_reference import dataset_samples


@pytest.fixture(scope="module")
def hub_file(tmp_path_factory) -> tuple[Path, list[dict]]:
    """A parquet file written by `datasets` (Image and ClassLabel features) in row groups of 4:
    22 rows, images embedded with their file names, a caption and another column."""
    import datasets
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("hub")
    rows = []
    for i in range(22):  # embedded bytes and the file's name, as push_to_hub stores images
        image = {
            "bytes": png_bytes(i) if i % 5 == 0 else jpeg_bytes(900 + i),
            "path": f"photo_{i:02d}.{'png' if i % 5 == 0 else 'jpg'}",
        }
        rows.append({"image": image, "label": i % 3, "caption": f"a photo {i}", "w": i / 2})
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.ClassLabel(names=["zebra", "ant", "moth"]),
            "caption": datasets.Value("string"),
            "w": datasets.Value("float64"),
        }
    )
    ds = datasets.Dataset.from_list(rows, features=features)
    out = root / "train.parquet"
    ds.to_parquet(str(out))
    table = pq.read_table(out)  # datasets writes one row group here: rewrite with 4 rows each
    pq.write_table(table, out, row_group_size=4)
    assert pq.ParquetFile(out).metadata.num_row_groups == 6
    return out, table.to_pylist()


def test_hub_parquet_packs_every_row_byte_for_byte(hub_file, tmp_path: Path) -> None:
    parquet, rows = hub_file
    dest = tmp_path / "ds"
    out = run_cli("pack", str(parquet), str(dest), "--max-count", "5", "--workers", "2", "--json")
    assert json.loads(out.stdout)["samples"] == 22
    m = json.loads((dest / "index.json").read_text())
    assert m["classes"] == ["zebra", "ant", "moth"]  # the ClassLabel's own order
    got = {k: dict(members) for k, members in dataset_samples(dest)}
    assert len(got) == 22
    for i, row in enumerate(rows):
        sample = got[f"train-{i:06d}"]  # the loader's key: the file's name and the row in it
        ext = ".png" if i % 5 == 0 else ".jpg"
        assert sample[ext] == row["image"]["bytes"]  # the bytes in the file, untouched
        assert sample[".cls"] == str(row["label"]).encode()
        assert sample[".txt"] == row["caption"].encode()
        meta = json.loads(sample[".json"])
        assert meta["w"] == row["w"] and meta["class"] == m["classes"][row["label"]]
        assert meta["path"] == row["image"]["path"]
    one = tmp_path / "one"
    run_cli("pack", str(parquet), str(one), "--max-count", "5", "--workers", "1", "-q")
    assert dir_bytes(one) == dir_bytes(dest)


def test_the_shuffle_permutes_row_groups_and_rows_within_them(hub_file, tmp_path: Path) -> None:
    parquet, _ = hub_file
    dest = tmp_path / "ds"
    run_cli("pack", str(parquet), str(dest), "--max-count", "4", "--workers", "1", "-q")
    order = [int(k.rsplit("-", 1)[1]) for k, _ in dataset_samples(dest)]
    groups = [n // 4 for n in order]
    runs = [g for i, g in enumerate(groups) if i == 0 or g != groups[i - 1]]
    assert sorted(runs) == list(range(6))  # each row group once, all its rows together
    assert runs != sorted(runs) and order != sorted(order)
    plain = tmp_path / "plain"
    run_cli("pack", str(parquet), str(plain), "--no-shuffle", "--workers", "1", "-q")
    assert [k for k, _ in dataset_samples(plain)] == [f"train-{i:06d}" for i in range(22)]


def test_raw_bytes_and_class_names(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    images = [jpeg_bytes(i) for i in range(6)]
    table = pa.table({"img": images, "label": ["owl", "cat", "owl", "bat", "cat", "owl"]})
    pq.write_table(table, tmp_path / "raw.parquet", row_group_size=2)
    dest = tmp_path / "ds"
    r = run_cli("pack", str(tmp_path / "raw.parquet"), str(dest), "--image-column", "img", "-q")
    assert r.returncode == 0
    assert json.loads((dest / "index.json").read_text())["classes"] == ["bat", "cat", "owl"]
    got = {int(k.removeprefix("raw-")): dict(m) for k, m in dataset_samples(dest)}
    assert [got[i][".jpg"] for i in range(6)] == images
    assert [got[i][".cls"] for i in range(6)] == [b"2", b"1", b"2", b"0", b"1", b"2"]


def test_bad_hub_files_are_one_line_errors(hub_file, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet, _ = hub_file
    for args, message in [
        (["--image-column", "picture"], "no image column 'picture' (columns found: 'image'"),
        (["--image-column", "caption"], "column 'caption' holds string, not images"),
    ]:
        r = run_cli("pack", str(parquet), str(tmp_path / "x"), *args, check=False)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and message in r.stderr
        assert not (tmp_path / "x" / "index.json").exists()
    broken = tmp_path / "broken.parquet"
    table = pa.table({"image": [jpeg_bytes(1), b"not an image", None], "label": [0, 1, 0]})
    pq.write_table(table, broken)
    r = run_cli("pack", str(broken), str(tmp_path / "y"), "--on-error", "fail", check=False)
    assert r.returncode == 1 and f"{broken}: row 2" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "y").exists() or not list((tmp_path / "y").glob("*.tar"))
    out = json.loads(run_cli("pack", str(broken), str(tmp_path / "y"), "--json").stdout)
    assert out["samples"] == 1 and [s["row"] for s in out["skipped"]] == [2, 3]
