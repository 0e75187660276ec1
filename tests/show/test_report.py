"""``wdstool show`` on a small data set full of hostile text: the samples it shows are real
samples with their labels and fields, the page escapes every piece of data-set text, the
pictures exist, the statistics are exact, the views are what make_loader delivers."""

from __future__ import annotations

import html.parser
import io
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

from loaders import make_loader
from shard_writer.sample_data import render
from tests.conftest import run_cli
from tests.show.conftest import CLASSES, SEED, SHARD_SIZES, SHOWN, CliReport, Truth, spans
from wdstool.base.errors import ConfigError
from wdstool.format.manifest import ShardEntry, build_manifest
from wdstool.format.tar_write import END, write_member
from wdstool.show import ShowConfig, build_report
from wdstool.show.views import model_views


class _Page(html.parser.HTMLParser):
    """Tags, attributes and text of a page, as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data) -> None:
        self.text.append(data)


def _page(report: CliReport) -> _Page:
    page = _Page()
    page.feed((report.out / "index.html").read_text(encoding="utf-8"))
    return page


def test_shown_samples_are_real_samples_with_their_labels_and_fields(
    cli_report: CliReport, hostile_dataset: Truth
) -> None:
    truth = hostile_dataset
    samples = cli_report.summary["samples"]
    assert len(samples) == SHOWN
    assert len({s["key"] for s in samples}) == SHOWN
    assert {s["shard"] for s in samples} == {f"part-{n:03d}.tar" for n in range(3)}
    where = {name: spans(truth.root / name) for name in {s["shard"] for s in samples}}
    for s in samples:
        key = s["key"]
        assert s["shard"] == truth.shard_of[key]
        assert (s["offset"], s["offset"] + s["bytes"]) == where[s["shard"]][key]
        assert s["label"] == truth.label[key] and s["class"] == CLASSES[truth.label[key]]
        assert s["fields"] == {"caption": truth.caption[key], "note": truth.note[key]}
        assert (s["image"]["width"], s["image"]["height"]) == truth.size[key]
        assert s["image"]["nbytes"] == len(truth.image[key])
        assert s["members"] == [truth.ext[key], "cls", "txt", "json"]
        assert s["problems"] == []
    assert any("<" in s["key"] for s in samples)  # hostile keys among them


def test_reads_stay_within_twice_what_is_shown(cli_report: CliReport) -> None:
    reads = cli_report.summary["reads"]
    assert reads["shown_bytes"] == sum(s["bytes"] for s in cli_report.summary["samples"])
    assert reads["bytes"] <= 2 * (reads["shown_bytes"] + reads["manifest_bytes"])


def test_the_page_shows_hostile_text_as_text(cli_report: CliReport) -> None:
    raw = (cli_report.out / "index.html").read_text(encoding="utf-8")
    page = _page(cli_report)
    assert "script" not in {tag for tag, _ in page.tags}
    assert not any(k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert "&lt;script&gt;" in raw
    tiles = [a for tag, a in page.tags if tag == "figure" and a.get("class") == "tile"]
    keys = [s["key"] for s in cli_report.summary["samples"]]
    assert [t["data-key"] for t in tiles] == keys  # every key, unescaped back exactly
    text = "".join(page.text)
    for s in cli_report.summary["samples"]:
        assert s["fields"]["caption"] in text and s["fields"]["note"] in text
    assert CLASSES[1] in text and CLASSES[2] in text and "hostile <b>set</b>" in text


def test_every_picture_the_page_names_is_in_the_folder(cli_report: CliReport) -> None:
    page = _page(cli_report)
    refs = [
        v
        for tag, attrs in page.tags
        if tag in ("img", "a")
        for k in ("src", "href")
        if (v := attrs.get(k)) and not v.startswith("#")
    ]
    assert refs
    for ref in refs:
        assert "://" not in ref and not ref.startswith("/"), ref  # opens offline
        assert (cli_report.out / ref).is_file(), ref
    folder = cli_report.out
    assert len(os.listdir(folder / "thumbs")) == SHOWN
    assert len(os.listdir(folder / "images")) == SHOWN
    assert len(os.listdir(folder / "views")) == SHOWN * 3  # 2 epochs + eval
    for name in ("shards", "classes", "sizes", "formats", "members"):
        assert (folder / "charts" / f"{name}.svg").read_bytes().lstrip().startswith(b"<?xml")
    for sample in cli_report.summary["samples"]:  # the full image is the stored one
        n, ext = sample["n"], "png" if sample["members"][0] == "png" else "jpg"
        assert Image.open(folder / "images" / f"{n:04d}.{ext}").size == (
            sample["image"]["width"],
            sample["image"]["height"],
        )


def test_png_contact_sheet(cli_report: CliReport) -> None:
    img = Image.open(cli_report.png)
    assert img.format == "PNG" and img.mode == "RGB"
    assert img.width == 8 * 174 + 6  # 8 columns of 168 px cells
    assert img.height == 28 + 3 * (168 + 6 + 28 + 6)  # 3 rows for 24 samples
    assert np.asarray(img).std() > 20  # photographs, not an empty canvas


def test_the_same_seed_draws_the_same_samples(cli_report: CliReport, hostile_dataset) -> None:
    keys = [s["key"] for s in cli_report.summary["samples"]]
    again = build_report(str(hostile_dataset.root), ShowConfig(samples=SHOWN, seed=SEED))
    assert [s["key"] for s in again["samples"]] == keys
    other = build_report(str(hostile_dataset.root), ShowConfig(samples=SHOWN, seed=SEED + 1))
    assert {s["key"] for s in other["samples"]} != set(keys)


def test_a_small_data_set_is_shown_whole_with_exact_statistics(hostile_dataset: Truth) -> None:
    truth = hostile_dataset
    got = build_report(str(truth.root), ShowConfig(samples=100))
    assert got["every_sample"]
    assert [s["key"] for s in got["samples"]] == list(truth.keys)
    stats = got["statistics"]
    assert stats["sampled"] == len(truth.keys)
    assert [s["samples"] for s in stats["shards"]["each"]] == list(SHARD_SIZES)
    assert {(r["name"], r["count"]) for r in stats["labels"]["classes"]} == {
        (CLASSES[k], n) for k, n in Counter(truth.label.values()).items()
    }
    assert stats["image_sizes"]["points"] == [list(truth.size[k]) for k in truth.keys]

    def pil_format(data: bytes) -> str:
        img = Image.open(io.BytesIO(data))
        if img.format == "PNG":
            return "png"
        if img.mode == "L":
            return "jpeg grey"
        sub = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}[JpegImagePlugin.get_sampling(img)]
        return f"jpeg {sub}" + (" progressive" if img.info.get("progressive") else "")

    want = Counter(pil_format(truth.image[k]) for k in truth.keys)
    assert {r["name"]: r["count"] for r in stats["formats"]} == want
    assert {r["name"]: r["count"] for r in stats["members"]} == Counter(
        f"{truth.ext[k]}+cls+txt+json" for k in truth.keys
    )


def test_views_are_the_pixels_make_loader_delivers(hostile_dataset: Truth) -> None:
    """The report's views of a few samples equal, pixel for pixel, what make_loader gives
    those samples when it reads the whole data set (shuffled, as in training) with that seed,
    in epochs 0 and 1 and in the eval recipe."""
    truth = hostile_dataset
    chosen = [truth.keys[i] for i in (4, 7, 10, 20, 33)]
    samples = [(k, truth.ext[k], truth.image[k]) for k in chosen]
    cols = ShowConfig(image_size=48).columns()  # default recipe, epochs 0 and 1, eval
    views = model_views(samples, cols, seed=SEED, image_size=48)
    assert views.stand_ins == ()

    def delivered(train: bool, epoch: int) -> dict[str, np.ndarray]:
        loader = make_loader(
            str(truth.root), 8, label=None, image_size=48, seed=SEED, train=train, num_workers=0
        )
        loader.set_epoch(epoch)
        out = {}
        for batch in loader:
            for key, img in zip(batch["keys"], batch["pixel_values"], strict=True):
                out[key] = img.permute(1, 2, 0).numpy()
        return out

    want = [delivered(True, 0), delivered(True, 1), delivered(False, 0)]
    for key, images in zip(chosen, views.images, strict=True):
        for c, image in enumerate(images):
            assert np.array_equal(image, want[c][key]), (key, cols[c].title)
    assert not np.array_equal(views.images[0][0], views.images[0][1])  # epochs differ


def test_a_key_no_tar_header_holds_gets_a_stand_in(hostile_dataset: Truth) -> None:
    truth = hostile_dataset
    key = truth.keys[0]
    samples = [("smörgås_1", "jpg", truth.image[key]), (key, "jpg", truth.image[key])]
    cols = ShowConfig(image_size=32, epochs=1, eval_transform=None).columns()
    views = model_views(samples, cols, seed=1, image_size=32)
    assert views.stand_ins == (0,)
    assert [len(v) for v in views.images] == [1, 1]


def test_errors_come_before_any_work(hostile_dataset: Truth, tmp_path: Path) -> None:
    root = str(hostile_dataset.root)
    with pytest.raises(ConfigError, match="eval-bicubic"):
        build_report(root, ShowConfig(transform="nosuch"), out_dir=str(tmp_path / "r"))
    with pytest.raises(ConfigError, match="label"):
        ShowConfig(label="txt")
    with pytest.raises(ConfigError, match="field note"):
        ShowConfig(fields=(("note", "json:"),))
    assert not (tmp_path / "r").exists()


def test_cli_bad_source_and_occupied_folder_are_one_line_errors(
    hostile_dataset: Truth, tmp_path: Path
) -> None:
    missing = tmp_path / "nothing-here"
    proc = run_cli("show", str(missing), "--json", check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and str(missing) in proc.stderr

    occupied = tmp_path / "mine"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("keep me")
    proc = run_cli("show", str(hostile_dataset.root), "--out", str(occupied), check=False)
    assert proc.returncode != 0 and str(occupied) in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert os.listdir(occupied) == ["notes.txt"]
    assert sorted(os.listdir(tmp_path)) == ["mine"]  # no half-written report beside it

    proc = run_cli("show", str(hostile_dataset.root), check=False)
    assert proc.returncode == 2 and "--out" in proc.stderr


def test_a_report_replaces_the_report_before_it(hostile_dataset: Truth, tmp_path: Path) -> None:
    out = tmp_path / "report"
    for seed in (1, 2):
        build_report(
            str(hostile_dataset.root),
            ShowConfig(samples=3, seed=seed, epochs=0, eval_transform=None),
            out_dir=str(out),
        )
    assert sorted(os.listdir(tmp_path)) == ["report"]
    assert len(os.listdir(out / "thumbs")) == 3


def test_shards_without_a_manifest(hostile_dataset: Truth, tmp_path: Path) -> None:
    """A folder of tars and a brace pattern: samples drawn by bytes, no count claimed."""
    folder = tmp_path / "tars"
    folder.mkdir()
    for f in hostile_dataset.root.glob("*.tar"):
        shutil.copy(f, folder)
    for source in (str(folder), str(folder / "part-{000..002}.tar")):
        got = build_report(source, ShowConfig(samples=10, seed=2))
        assert len({s["key"] for s in got["samples"]}) == 10
        for s in got["samples"]:
            assert hostile_dataset.shard_of[s["key"]] == s["shard"]
            assert s["label"] == hostile_dataset.label[s["key"]] and s["class"] is None
        assert got["statistics"]["dataset"]["samples"] is None
        assert got["reads"]["manifest_bytes"] == 0


def test_an_undecodable_image_is_shown_as_a_problem(tmp_path: Path) -> None:
    root = tmp_path / "shards"
    root.mkdir()
    good = render(1, 0, 2, size=(120, 90))
    members = [("a", good), ("b", b"\xff\xd8\xff\xe0" + bytes(range(256)) * 8), ("c", good)]
    with open(root / "s-000.tar", "wb") as f:
        size = sum(write_member(f.write, f"{k}.jpg", data) for k, data in members)
        f.write(END)
    manifest = build_manifest(
        [ShardEntry("s-000.tar", 3, size + len(END), "")],
        classes=(),
        fingerprint="",
        options={},
        skipped=[],
    )
    (root / "index.json").write_bytes(manifest.dumps())
    out = tmp_path / "report"
    got = build_report(
        str(root),
        ShowConfig(samples=5, epochs=1, eval_transform=None, image_size=32),
        out_dir=str(out),
    )
    assert [s["key"] for s in got["samples"]] == ["a", "b", "c"]
    assert [bool(s["problems"]) for s in got["samples"]] == [False, True, False]
    assert "s-000.tar" in got["samples"][1]["problems"][0]
    assert sorted(os.listdir(out / "views")) == ["0000-0.jpg", "0002-0.jpg"]
    assert 'class="nopic"' in (out / "index.html").read_text()


def test_help_names_every_recipe_preset() -> None:
    """The CLI lists the presets without importing the loaders (torch) at start-up."""
    from loaders.recipe.presets import PRESETS
    from wdstool.cli.show import show_cmd

    option = next(p for p in show_cmd.params if p.name == "transform")
    assert all(name in option.help for name in PRESETS)


def test_text_no_encoder_takes_is_escaped_not_fatal(tmp_path: Path) -> None:
    """A class name or JSON field holding a lone surrogate (valid JSON: "\\ud800") or terminal
    escapes still makes a page, a chart and a PNG."""
    root = tmp_path / "shards"
    root.mkdir()
    with open(root / "a.tar", "wb") as f:
        size = 0
        for i in range(3):
            size += write_member(f.write, f"k{i}.jpg", render(0, i, 2, size=(80, 60)))
            size += write_member(f.write, f"k{i}.cls", str(i % 2).encode())
            size += write_member(f.write, f"k{i}.json", b'{"x": "\\ud800 \\u001b[31m red"}')
        f.write(END)
    manifest = build_manifest(
        [ShardEntry("a.tar", 3, size + len(END), "")],
        classes=("ok\ud800", "tab\tnew\nline"),
        fingerprint="",
        options={},
        skipped=[],
    )
    (root / "index.json").write_text(json.dumps(manifest.to_json()))
    config = ShowConfig(samples=3, epochs=0, eval_transform=None, fields=(("x", "json:x"),))
    got = build_report(str(root), config, out_dir=str(tmp_path / "r"), png=str(tmp_path / "p.png"))
    assert [s["class"] for s in got["samples"]] == ["ok\ud800", "tab\tnew\nline", "ok\ud800"]
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "ok\\ud800" in page  # written escaped
    assert (tmp_path / "r" / "charts" / "classes.svg").is_file()
    assert Image.open(tmp_path / "p.png").width > 0


def test_samples_of_several_images_show_their_images_beside_their_text(tmp_path: Path) -> None:
    from shard_writer.pack import PackOptions, pack
    from tests.support.interleaved import obelics_rows, write_rows

    rows = obelics_rows(tmp_path, 5)
    dest = tmp_path / "docs"
    pack(str(write_rows(tmp_path / "docs.jsonl", rows)), str(dest), PackOptions(workers=1))
    out, png = tmp_path / "report", tmp_path / "sheet.png"
    got = build_report(
        str(dest),
        ShowConfig(samples=10, epochs=1, eval_transform=None, image_size=32),
        out_dir=str(out),
        png=str(png),
    )
    assert got["every_sample"] and len(got["samples"]) == 5
    page = (out / "index.html").read_text(encoding="utf-8")
    for s in got["samples"]:
        row = rows[int(s["key"].split("_", 1)[0])]
        paths = [p for p in row["images"] if p is not None]
        facts = s["interleaved"]
        assert s["problems"] == [] and facts["images"] == len(paths)
        assert facts["sizes"] == [list(Image.open(tmp_path / p).size) for p in paths]
        marks = iter(f"[image {n}]" for n in range(len(paths)))
        text = "".join(t if t is not None else next(marks) for t in row["texts"])
        assert facts["text"] == text and s["fields"]["text"] == text
        assert s["image"]["width"] == facts["sizes"][0][0]  # the first image in the statistics
        with Image.open(out / "thumbs" / f"{s['n']:04d}.jpg") as strip:  # side by side
            widths, heights = zip(*facts["sizes"], strict=True)  # small: not scaled
            assert strip.size == (sum(widths) + 4 * (len(paths) - 1), max(heights))
        assert f"{len(paths)} images (" in page
    assert "[image 0]" in page and not (out / "views").exists()
    with Image.open(png) as sheet:
        assert sheet.size[0] > 0
