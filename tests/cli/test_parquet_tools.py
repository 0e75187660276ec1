"""The tools on Parquet files written by Hugging Face ``datasets`` itself (an ``Image`` column of
real JPEGs, a ``ClassLabel`` label, a text column; row groups of 50 rows): ``inspect`` reads
the footers only (over hf://, counted at the server), ``verify`` passes and then names the one
damaged row group, ``show`` draws real rows and reads only their row groups, and its views are
what make_loader delivers for those rows; ``stream-bench`` measures the loader on them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from loaders import make_loader
from loaders.bench.baselines import samples_of
from loaders.mixing import resolve_any
from tests.conftest import jpeg_bytes
from tests.support.parquet import damage_group
from tests.support.webserver import WebServer
from wdstool.cli import cli
from wdstool.show import ShowConfig
from wdstool.show.views import model_views

CLASSES = ("cat", "dog", "eel")
FILES, ROWS, GROUP = 2, 120, 50  # row groups of 50, 50, 20 rows a file


def write_split(
    folder: Path, split: str = "train", files: int = FILES, rows: int = ROWS, cut: int = -1
) -> dict[str, dict]:
    """``files`` files as datasets names them; key -> image, label, text. Row ``cut`` of the
    first file holds a JPEG cut short."""
    import datasets

    features = datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.ClassLabel(names=list(CLASSES)),
            "text": datasets.Value("string"),
        }
    )
    folder.mkdir(parents=True, exist_ok=True)
    truth = {}
    for k in range(files):
        name = f"{split}-{k:05d}-of-{files:05d}"
        images = [jpeg_bytes(k * 1000 + i, (24 + i % 9, 16 + i % 5)) for i in range(rows)]
        if k == 0 and cut >= 0:
            images[cut] = images[cut][: len(images[cut]) // 2]
        labels = [(k + i) % len(CLASSES) for i in range(rows)]
        texts = [f"{split} file {k} row {i}" for i in range(rows)]
        datasets.Dataset.from_dict(
            {"image": [{"bytes": b, "path": None} for b in images], "label": labels, "text": texts},
            features=features,
        ).to_parquet(str(folder / f"{name}.parquet"), batch_size=GROUP)
        for i in range(rows):
            truth[f"{name}-{i:06d}"] = {"image": images[i], "label": labels[i], "text": texts[i]}
    return truth


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    root = tmp_path_factory.mktemp("parquet")
    return root, write_split(root / "data")


def wdstool(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_inspect_reads_the_footers_only(split, monkeypatch: pytest.MonkeyPatch) -> None:
    root, truth = split
    files = sorted((root / "data").glob("*.parquet"))
    with WebServer(root) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        r = wdstool("inspect", "--json", "hf://datasets/org/pets#train")
        sent = server.total_sent(".parquet")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["format"] == "parquet"
    assert (info["num_files"], info["num_row_groups"], info["num_samples"]) == (2, 6, 240)
    assert (info["min_rows"], info["max_rows"]) == (20, 50)
    assert [(c["name"], c["kind"], c["feature"]) for c in info["columns"]] == [
        ("image", "image", "Image"),
        ("label", "int", "ClassLabel"),
        ("text", "string", "Value"),
    ]
    assert (info["image_column"], info["label_column"]) == ("image", "label")
    assert info["classes"] == list(CLASSES)
    assert info["total_bytes"] == sum(f.stat().st_size for f in files)
    assert [f["rows"] for f in info["files"]] == [ROWS, ROWS]
    assert info["sample_keys"] == list(truth)[:5]
    assert 0 < sent <= info["footer_bytes"] < info["total_bytes"] / 4  # no row was read

    r = wdstool("inspect", str(root / "data"))  # a folder; the text report
    assert r.exit_code == 0, r.output
    assert "files     2  (6 row groups, rows per group: min 20, max 50)" in r.output
    assert "samples   240 rows" in r.output
    assert "column    label: ClassLabel (int)" in r.output
    assert "classes   3: cat, dog, eel" in r.output


def test_verify_passes_then_names_the_damaged_row_group(split, tmp_path: Path) -> None:
    root, _truth = split
    r = wdstool("verify", "-q", "--decode", str(root / "data"))
    assert r.exit_code == 0, r.output
    assert "ok: 2 files, 6 row groups, 240 rows, image column 'image', label column 'label'" in (
        r.output
    )

    bad = tmp_path / "bad"
    shutil.copytree(root / "data", bad)
    damaged = bad / f"train-00001-of-{FILES:05d}.parquet"
    damage_group(damaged, 1)
    r = wdstool("verify", "-q", "--json", str(bad))
    assert r.exit_code == 1
    report = json.loads(r.stdout)
    assert [(d["url"], d["row_group"]) for d in report["damaged"]] == [(str(damaged), 1)]
    assert not report["ok"]
    assert f"Error: {damaged}: row group 1 does not decode" in r.stderr
    assert "1 of 6 row group(s) in 1 of 2 file(s) damaged" in r.stderr


def test_verify_names_an_image_cut_short(tmp_path: Path) -> None:
    write_split(tmp_path / "cut", files=1, rows=70, cut=63)
    r = wdstool("verify", "-q", str(tmp_path / "cut"))
    assert r.exit_code == 1
    name = tmp_path / "cut" / "train-00000-of-00001.parquet"
    assert (
        f"Error: {name}: row group 1: row 63 (key 'train-00000-of-00001-000063'): image column "
        "'image': truncated JPEG" in r.stderr
    )


def test_show_draws_rows_and_reads_only_their_row_groups(split, tmp_path: Path) -> None:
    root, truth = split
    out, png = tmp_path / "report", tmp_path / "sheet.png"
    args = ["show", str(root / "data"), "--samples", "3", "--seed", "5", "--epochs", "1"]
    r = wdstool(*args, "--image-size", "32", "--out", str(out), "--png", str(png), "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert len(got["samples"]) == 3
    for s in got["samples"]:
        want = truth[s["key"]]
        assert (s["label"], s["class"]) == (want["label"], CLASSES[want["label"]])
        assert s["fields"] == {"text": want["text"]}
        assert s["row_group"] == s["row"] // GROUP and s["members"] == ["jpg", "label", "text"]
        i = s["row"]
        assert (s["image"]["width"], s["image"]["height"]) == (24 + i % 9, 16 + i % 5)
        assert s["image"]["nbytes"] == len(want["image"]) and not s["problems"]
    stats = got["statistics"]
    assert stats["dataset"] | {"source": None} == {
        "source": None,
        "format": "parquet",
        "manifest": None,
        "name": "",
        "shards": 2,
        "samples": 240,
        "bytes": sum(f.stat().st_size for f in (root / "data").glob("*.parquet")),
        "classes": 3,
    }
    assert stats["sampled"] > 3  # rows of the groups read, besides the shown ones
    # the image, label and text chunks of the row groups drawn, and the footers: no others
    groups = {(s["shard"], s["row_group"]) for s in got["samples"]}
    chunks = 0
    for name, g in groups:
        rg = pq.read_metadata(root / "data" / name).row_group(g)
        chunks += sum(rg.column(j).total_compressed_size + 128 for j in range(rg.num_columns))
    assert got["reads"]["bytes"] <= got["reads"]["manifest_bytes"] + chunks
    assert len(groups) < 6 and got["reads"]["bytes"] < stats["dataset"]["bytes"] / 2
    page = (out / "index.html").read_text()
    assert "row groups" in page and "(row group " in page
    assert len(list((out / "thumbs").glob("*.jpg"))) == 3 and png.stat().st_size > 0
    assert len(list((out / "views").glob("*.jpg"))) == 3 * 2  # epoch 0 and eval


def test_show_views_are_what_make_loader_delivers_for_those_rows(split, tmp_path: Path) -> None:
    """The rows a report shows, by its keys and its copies of their images, through the
    report's views: the pixels make_loader gives those keys reading the files."""
    root, _truth = split
    out = tmp_path / "report"
    args = ["--samples", "4", "--seed", "2", "--epochs", "0", "--eval-transform", "none"]
    r = wdstool("show", str(root / "data"), *args, "--out", str(out), "--json", "-q")
    keys = [s["key"] for s in json.loads(r.stdout)["samples"]]
    shown = [(out / "images" / f"{n:04d}.jpg").read_bytes() for n in range(len(keys))]
    cols = ShowConfig(image_size=24, epochs=1, eval_transform=None).columns()
    samples = [(k, "jpg", b) for k, b in zip(keys, shown, strict=True)]
    views = model_views(samples, cols, seed=7, image_size=24)
    assert views.stand_ins == ()
    loader = make_loader(str(root / "data"), 16, label=None, image_size=24, seed=7, num_workers=0)
    loader.set_epoch(0)
    delivered = {}
    for batch in loader:
        for key, img in zip(batch["keys"], batch["pixel_values"], strict=True):
            delivered[key] = img.permute(1, 2, 0).numpy()
    for key, images in zip(keys, views.images, strict=True):
        assert np.array_equal(images[0], delivered[key]), key


def test_stream_bench_measures_the_loader_on_parquet(split, tmp_path: Path) -> None:
    root, truth = split
    report = tmp_path / "bench.json"
    common = ["--repeats", "1", "--workers", "0", "--batch-size", "8", "--image-size", "32"]
    r = wdstool(
        "stream-bench", str(root / "data"), *common, "--batches", "3", "-q", "--json", str(report)
    )
    assert r.exit_code == 0, r.output
    runs = json.loads(report.read_text())["runs"]
    assert [x["name"] for x in runs] == ["wdstool"] and runs[0]["batches"] > 0
    assert runs[0]["mb_per_s"] > 0  # bytes per row from the footers
    r = CliRunner().invoke(
        cli, ["stream-bench", str(root / "data"), *common, "--compare", "webdataset"]
    )
    assert r.exit_code != 0
    assert "Parquet files; the webdataset baselines read tar shards" in r.output
    # the ceiling's images: every row's, in order
    images = [p["jpg"] for p in samples_of(resolve_any(str(root / "data"), None), None)]
    assert images == [t["image"] for t in truth.values()]
