"""`wdstool pack LISTING DEST`: CSV, TSV, JSON Lines and parquet listings packed into real shards,
read back with upstream webdataset and make_loader; the pack's promises (same bytes whatever the
workers, skip/fail, resume after kill -9, Ray) hold for listings as for trees."""

from __future__ import annotations

import csv
import datetime
import decimal
import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds

from shard_writer.pack import PackOptions, pack
from shard_writer.verify import verify_dataset
from tests.conftest import REPO, dir_bytes, jpeg_bytes, png_bytes, run_cli
from wdstool.base.errors import DestinationError


def write_listing(path: Path, rows: list[dict[str, Any]], columns: list[str] | None = None) -> Path:
    """rows as a .csv, .tsv, .jsonl or .parquet file (by the suffix of ``path``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    if path.suffix in (".csv", ".tsv"):
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, columns, delimiter="," if path.suffix == ".csv" else "\t")
            w.writeheader()
            w.writerows(rows)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def image_rows(root: Path, n: int, seed: int = 0, labels: list[Any] | None = None) -> list[dict]:
    """n real JPEGs under root/img/ (some nested), one row each: path relative to root."""
    rows = []
    for i in range(n):
        rel = f"img/{'deep/er/' if i % 4 == 0 else ''}p{i:03d}.jpg"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(jpeg_bytes(seed * 1009 + i))
        row: dict[str, Any] = {"path": rel}
        if labels is not None:
            row["label"] = labels[i % len(labels)]
        rows.append(row)
    return rows


def samples(dest: Path) -> dict[str, dict[str, bytes]]:
    """Every sample of a packed dataset, read with upstream webdataset: key -> members."""
    m = json.loads((dest / "index.json").read_text())
    out = {}
    for e in m["shardlist"]:
        for s in wds.WebDataset(str(dest / e["url"]), shardshuffle=False):
            out[s["__key__"]] = {k: v for k, v in s.items() if not k.startswith("__")}
    assert len(out) == m["num_samples"]
    return out


def by_row(dest: Path) -> dict[int, dict[str, bytes]]:
    """Samples by listing row index (the number that starts the key)."""
    return {int(k.split("_", 1)[0]): v for k, v in samples(dest).items()}


def test_csv_with_class_names_sorted_as_imagefolder(tmp_path: Path) -> None:
    names = ["b", "B", "a9", "a10", "3", "émeu"]  # "3" is a name: not every label is digits
    rows = image_rows(tmp_path, 14, labels=names)
    rows[5]["path"] = "./" + rows[5]["path"]  # normalised for reading, kept as given in .json
    listing = write_listing(tmp_path / "lists" / ".." / "list.csv", rows)
    dest = tmp_path / "out"
    pack(str(listing), str(dest), PackOptions(workers=1, max_count=4))
    m = json.loads((dest / "index.json").read_text())
    classes = sorted(set(names))
    assert m["classes"] == classes == ["3", "B", "a10", "a9", "b", "émeu"]
    assert m["num_samples"] == 14 and m["num_shards"] == 4
    got = by_row(dest)
    assert sorted(got) == list(range(14))
    for i, s in got.items():
        meta = json.loads(s["json"])
        assert int(s["cls"]) == classes.index(names[i % len(names)]) == meta["class_index"]
        assert meta["class"] == names[i % len(names)]
        assert meta["path"] == rows[i]["path"] and (meta["width"], meta["height"]) == (64, 48)
        assert set(s) == {"jpg", "cls", "json"}  # no caption column, no other columns
    # the pack-time shuffle mixed the rows across shards
    shard = wds.WebDataset(str(dest / "train-000000.tar"), shardshuffle=False)
    first = [int(s["__key__"].split("_")[0]) for s in shard]
    assert first != sorted(first)
    assert verify_dataset(str(dest), decode=True)["ok"]


def test_jsonl_captions_typed_columns_and_absolute_and_nested_paths(tmp_path: Path) -> None:
    rows = image_rows(tmp_path / "data", 6, seed=2, labels=[0, 7, 2])
    elsewhere = tmp_path / "elsewhere" / "x.png"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(png_bytes(4))
    rows[1]["path"] = str(elsewhere)  # absolute
    rows[2]["path"] = "../data/" + rows[2]["path"]  # relative, through ..
    rows[3]["path"] = elsewhere.with_name("y.png").as_uri()  # file:// URL
    elsewhere.with_name("y.png").write_bytes(png_bytes(5))
    captions = ["a cat ☃ «on» a mat", None, "", 'tab\tand "quotes"\nnewline', "ok", "last"]
    for i, r in enumerate(rows):
        r["caption"] = captions[i]
        r["score"] = i / 4
        r["tags"] = ["x", i]
        r["nested"] = {"a": {"b": None}, "ok": i % 2 == 0}
    rows[4]["width"] = "the listing's own width"  # a listing's own column wins
    rows[5].pop("score")  # JSON Lines rows may leave a column out
    listing = write_listing(tmp_path / "data" / "list.jsonl", rows)
    dest = tmp_path / "out"
    pack(str(listing), str(dest), PackOptions(workers=1, max_count=4))
    m = json.loads((dest / "index.json").read_text())
    assert m["classes"] == [] and m["num_samples"] == 6  # integer labels: no class names
    got = by_row(dest)
    for i, s in got.items():
        meta = json.loads(s["json"])
        assert int(s["cls"]) == rows[i]["label"] == meta["class_index"] and "class" not in meta
        # a caption column: every sample has KEY.txt, empty for an empty or null caption
        assert s["txt"].decode("utf-8") == (captions[i] or "")
        assert meta["path"] == rows[i]["path"]
        assert meta["tags"] == ["x", i] and meta["nested"] == {"a": {"b": None}, "ok": i % 2 == 0}
        assert meta.get("score") == (i / 4 if i != 5 else None)
        if i == 4:
            assert meta["width"] == "the listing's own width"
        else:
            assert meta["width"] == (40 if i in (1, 3) else 64)
    assert "png" in got[1] and json.loads(got[1]["json"])["format"] == "png"
    assert verify_dataset(str(dest))["ok"]


def test_tsv_with_renamed_columns_through_the_cli(tmp_path: Path) -> None:
    rows = image_rows(tmp_path, 5, seed=3)
    table = [
        {"file": r["path"], "cat": ["12", "3", "007"][i % 3], "text": f"caption\t{i}", "path": "p"}
        for i, r in enumerate(rows)
    ]
    listing = write_listing(tmp_path / "l.tsv", table)
    dest = tmp_path / "out"
    cols = ["--path-column", "file", "--label-column", "cat", "--caption-column", "text"]
    r = run_cli("pack", str(listing), str(dest), *cols, "--json", "--workers", "1")
    assert json.loads(r.stdout)["samples"] == 5
    for i, s in by_row(dest).items():
        assert int(s["cls"]) == int(table[i]["cat"])  # every label digits: integer labels
        assert s["txt"] == f"caption\t{i}".encode()
        meta = json.loads(s["json"])
        assert meta["path"] == "p"  # a column named "path" is the listing's own: it wins
        assert "file" not in meta and "cat" not in meta and "text" not in meta
    assert json.loads((dest / "index.json").read_text())["classes"] == []


def test_parquet_types_become_json(tmp_path: Path) -> None:
    rows = image_rows(tmp_path, 4, seed=4, labels=["dog", "cat"])
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    for i, r in enumerate(rows):
        r.update(
            caption=f"photo {i}",
            taken=when,
            day=datetime.date(2024, 1, i + 1),
            price=decimal.Decimal("1.10"),
            count=i,
            ratio=0.5 * i,
            point={"x": i, "y": None},
        )
    listing = write_listing(tmp_path / "l.parquet", rows)
    dest = tmp_path / "out"
    pack(str(listing), str(dest), PackOptions(workers=1))
    assert json.loads((dest / "index.json").read_text())["classes"] == ["cat", "dog"]
    for i, s in by_row(dest).items():
        meta = json.loads(s["json"])
        assert meta["taken"] == "2024-05-06T07:08:09+00:00"
        assert meta["day"] == f"2024-01-0{i + 1}" and meta["price"] == "1.10"
        assert meta["count"] == i and meta["ratio"] == 0.5 * i
        assert meta["point"] == {"x": i, "y": None}
        assert int(s["cls"]) == ["cat", "dog"].index(rows[i]["label"])
        assert s["txt"] == f"photo {i}".encode()


def test_without_labels_there_is_no_cls_member(tmp_path: Path) -> None:
    rows = image_rows(tmp_path, 3, seed=5)
    dest = tmp_path / "out"
    pack(str(write_listing(tmp_path / "l.jsonl", rows)), str(dest), PackOptions(workers=1))
    assert all(set(s) == {"jpg", "json"} for s in samples(dest).values())
    assert json.loads((dest / "index.json").read_text())["classes"] == []
    assert "class_index" not in json.loads(next(iter(samples(dest).values()))["json"])
    assert verify_dataset(str(dest))["ok"]


def test_round_trip_through_make_loader_and_webdataset(tmp_path: Path) -> None:
    from loaders import make_loader

    names = ["tabby", "husky", "koi"]
    rows = image_rows(tmp_path, 20, seed=6, labels=names)
    for i, r in enumerate(rows):
        r["caption"] = f"image number {i}"
    dest = tmp_path / "out"
    pack(str(write_listing(tmp_path / "l.csv", rows)), str(dest), PackOptions(max_count=6))
    loader = make_loader(dest, 4, image_size=32, train=False, shuffle=False, num_workers=0)
    delivered = {}
    for batch in loader:
        for key, label in zip(batch["keys"], batch["labels"].tolist(), strict=True):
            delivered[int(key.split("_")[0])] = label
    want = {i: sorted(names).index(r["label"]) for i, r in enumerate(rows)}
    assert delivered == want
    urls = [str(p) for p in sorted(dest.glob("*.tar"))]
    captions = {
        int(key.split("_")[0]): txt
        for key, txt in wds.WebDataset(urls, shardshuffle=False).decode().to_tuple("__key__", "txt")
    }
    assert captions == {i: r["caption"] for i, r in enumerate(rows)}


def test_same_bytes_whatever_the_workers_and_row_order_matters(tmp_path: Path) -> None:
    rows = image_rows(tmp_path, 24, seed=7, labels=["x", "y", "z"])
    listing = write_listing(tmp_path / "l.csv", rows)
    opts = ["--max-count", "5", "-q"]
    run_cli("pack", str(listing), str(tmp_path / "a"), "--workers", "1", *opts)
    run_cli("pack", str(listing), str(tmp_path / "b"), "--workers", "2", *opts)
    assert dir_bytes(tmp_path / "a") == dir_bytes(tmp_path / "b")
    assert len(list((tmp_path / "a").glob("*.tar"))) == 5
    reordered = write_listing(tmp_path / "r.csv", rows[::-1])
    run_cli("pack", str(reordered), str(tmp_path / "c"), "--workers", "1", *opts)
    assert set(samples(tmp_path / "c")) != set(samples(tmp_path / "a"))  # keys follow the rows


def _bad_rows(root: Path) -> list[dict]:
    rows = image_rows(root, 8, seed=8, labels=["a", "b"])
    (root / "img" / "notes.jpg").write_text("not an image at all")
    (root / "img" / "cut.jpg").write_bytes(jpeg_bytes(99)[:400])
    (root / "img" / "folder.jpg").mkdir()
    extra = ["img/gone.jpg", "img/notes.jpg", "img/cut.jpg", "img/folder.jpg"]
    for pos, path in zip((2, 5, 6, 9), extra, strict=True):
        rows.insert(pos, {"path": path, "label": "a"})
    return rows


def test_on_error_skip_lists_the_rows_and_fail_publishes_nothing(tmp_path: Path) -> None:
    listing = write_listing(tmp_path / "l.csv", _bad_rows(tmp_path))
    r = run_cli("pack", str(listing), str(tmp_path / "out"), "--max-count", "3", "--json")
    summary = json.loads(r.stdout)
    assert summary["samples"] == 8
    skipped = {s["row"]: (s["path"], s["reason"]) for s in summary["skipped"]}
    assert skipped.keys() == {3, 6, 7, 10}  # rows count from 1 after the header
    assert skipped[3] == ("img/gone.jpg", "missing file")
    assert skipped[6][0] == "img/notes.jpg" and "not an image" in skipped[6][1]
    assert skipped[7][0] == "img/cut.jpg" and "truncated" in skipped[7][1]
    assert skipped[10] == ("img/folder.jpg", "not a file (a directory)")
    manifest = json.loads((tmp_path / "out" / "index.json").read_text())
    assert manifest["skipped"] == summary["skipped"]
    human = run_cli("pack", str(listing), str(tmp_path / "out2"), "--max-count", "3").stdout
    assert "skipped 4 inputs:" in human and "row 3: img/gone.jpg: missing file" in human

    fail = run_cli("pack", str(listing), str(tmp_path / "f"), "--on-error", "fail", check=False)
    assert fail.returncode == 1 and fail.stderr.count("\n") == 1
    assert fail.stderr.startswith(f"Error: {listing}: row 3: ")
    assert str(tmp_path / "img" / "gone.jpg") in fail.stderr and "missing file" in fail.stderr
    assert not list((tmp_path / "f").glob("*.tar")) and not (tmp_path / "f" / "index.json").exists()


@pytest.mark.parametrize("change", ["caption", "extra"])
def test_a_changed_listing_is_not_the_interrupted_pack(tmp_path: Path, change: str) -> None:
    rows = image_rows(tmp_path, 6, seed=9, labels=[1, 2])
    for r in rows:
        r.update(caption="same", note="same")
    listing = tmp_path / "l.jsonl"
    write_listing(listing, rows)
    dest = tmp_path / "out"

    def interrupt(items: int, shards: int, phase: str) -> None:
        if phase == "pack":  # DEST now records the fingerprint of an unfinished pack
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack(str(listing), str(dest), PackOptions(workers=1, max_count=2), on_total=interrupt)
    rows[4][{"caption": "caption", "extra": "note"}[change]] = "changed"
    write_listing(listing, rows)
    with pytest.raises(DestinationError, match="interrupted pack of a different source"):
        pack(str(listing), str(dest), PackOptions(workers=1, max_count=2))
    pack(str(listing), str(dest), PackOptions(workers=1, max_count=2, overwrite=True))
    got = by_row(dest)[4]
    assert (got["txt"] if change == "caption" else json.loads(got["json"])["note"]) in (
        b"changed",
        "changed",
    )


@pytest.mark.slow
@pytest.mark.parametrize("run", range(2))
def test_kill_9_then_rerun_is_byte_identical(tmp_path_factory, run: int) -> None:
    from tests.shard_writer.test_resume import kill_mid_pack

    root = tmp_path_factory.getbasetemp() / "listing-resume"
    listing, ref = root / "list.jsonl", root / "ref"
    args = ["--max-count", "5", "--workers", "2", "-q"]
    if not ref.exists():  # shared by both runs
        rows = image_rows(root, 300, seed=10, labels=["p", "q", "r"])
        for i, r in enumerate(rows):
            r["caption"] = f"row {i}"
        write_listing(listing, rows)
        run_cli("pack", str(listing), str(ref), *args)
    hashes = {
        e["url"]: e["sha256"] for e in json.loads((ref / "index.json").read_text())["shardlist"]
    }
    dest = tmp_path_factory.mktemp("resume") / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wdstool", "pack", str(listing), str(dest), *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    kill_mid_pack(proc, dest, random.Random(run), max_shards=40)
    assert not (dest / "index.json").exists(), "the pack finished before the kill"
    for p in dest.glob("*.tar"):  # whatever sits under a final name is complete and correct
        assert hashlib.sha256(p.read_bytes()).hexdigest() == hashes[p.name], p.name
    r = run_cli("pack", str(listing), str(dest), *args[:-1], "--json")
    assert json.loads(r.stdout)["samples"] == 300
    assert dir_bytes(dest) == dir_bytes(ref)
