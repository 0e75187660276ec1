"""A small data set written as another tool might write it, with hostile text everywhere a
report shows text: keys, captions, class names and JSON fields carry <script> and <img
onerror=...> payloads. Images are real photographs (wdstool sample-data's renderer), a few
PNGs, grey, 4:4:4 and progressive JPEGs among them."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from shard_writer.sample_data import render
from wdstool.format.manifest import ShardEntry, build_manifest
from wdstool.format.tar_write import END, write_member

# executed, any of these marks the page (data-pwned on <body>) or opens an alert
PWN = "document.body.setAttribute('data-pwned',1)"
CLASSES = (
    "tabby cat",
    f"<script>{PWN}</script>",
    f'<img src=x onerror="{PWN}">',
    'dog & "friends"',
)
SHARD_SIZES = (14, 12, 10)


@dataclass(frozen=True)
class Truth:
    """What the data set holds, for the tests to check a report against."""

    root: Path
    keys: tuple[str, ...]  # in shard order
    shard_of: dict[str, str]
    label: dict[str, int]
    caption: dict[str, str]
    note: dict[str, str]
    size: dict[str, tuple[int, int]]
    image: dict[str, bytes]
    ext: dict[str, str]


def _key(i: int) -> str:
    if i % 9 == 4:  # dot-free: a member's extension starts at the first dot
        return f"<img src=x onerror=alert({i})>_{i:03d}"
    if i % 9 == 7:
        return f"<script>alert({i})</script>_{i:03d}"
    return f"{i:06d}_photo"


def _image(i: int) -> tuple[str, bytes]:
    data = render(7, i, len(CLASSES), size=(220, 170))
    if i % 12 == 5:  # a PNG
        out = io.BytesIO()
        Image.open(io.BytesIO(data)).save(out, format="PNG")
        return "png", out.getvalue()
    if i % 12 in (2, 9):  # grey / 4:4:4 progressive
        img = Image.open(io.BytesIO(data))
        out = io.BytesIO()
        if i % 12 == 2:
            img.convert("L").save(out, format="JPEG", quality=90)
        else:
            img.save(out, format="JPEG", quality=90, subsampling=0, progressive=True)
        return "jpg", out.getvalue()
    return "jpg", data


@pytest.fixture(scope="session")
def hostile_dataset(tmp_path_factory) -> Truth:
    root = tmp_path_factory.mktemp("show") / "shards"
    root.mkdir()
    keys, shard_of, label, caption, note, size, image, exts = [], {}, {}, {}, {}, {}, {}, {}
    entries = []
    i = 0
    for n, count in enumerate(SHARD_SIZES):
        name = f"part-{n:03d}.tar"
        with open(root / name, "wb") as f:
            total = 0
            for _ in range(count):
                key = _key(i)
                ext, data = _image(i)
                keys.append(key)
                shard_of[key] = name
                label[key] = i % len(CLASSES)
                caption[key] = f'photo {i} <script>{PWN}</script> & <img src=x onerror="{PWN}">'
                note[key] = f'<svg onload="{PWN}"> row {i}'
                size[key] = Image.open(io.BytesIO(data)).size
                image[key], exts[key] = data, ext
                meta = {"url": f'https://example.invalid/{i}.jpg?a=<b>&c="d"', "note": note[key]}
                total += write_member(f.write, f"{key}.{ext}", data)
                total += write_member(f.write, f"{key}.cls", str(label[key]).encode())
                total += write_member(f.write, f"{key}.txt", caption[key].encode())
                total += write_member(f.write, f"{key}.json", json.dumps(meta).encode())
                i += 1
            f.write(END)
            total += len(END)
        entries.append(ShardEntry(name, count, total, ""))
    manifest = build_manifest(
        entries, classes=CLASSES, fingerprint="", options={}, skipped=[], name="hostile <b>set</b>"
    )
    (root / "index.json").write_bytes(manifest.dumps())
    return Truth(root, tuple(keys), shard_of, label, caption, note, size, image, exts)


def spans(shard: Path) -> dict[str, tuple[int, int]]:
    """key -> (offset of its first header, offset past its last member), read with tarfile."""
    out: dict[str, tuple[int, int]] = {}
    with tarfile.open(shard) as tf:
        for m in tf.getmembers():
            key = m.name.rsplit("/", 1)[-1]
            key = m.name[: len(m.name) - len(key)] + key.split(".", 1)[0]
            end = m.offset_data + -(-m.size // 512) * 512
            start = out[key][0] if key in out else m.offset
            out[key] = (start, end)
    return out


@dataclass(frozen=True)
class CliReport:
    out: Path
    png: Path
    summary: dict


SHOWN = 24
SEED = 5


@pytest.fixture(scope="session")
def cli_report(hostile_dataset: Truth, tmp_path_factory) -> CliReport:
    """``wdstool show`` run once, as a user runs it: the report folder, the PNG and --json."""
    from tests.conftest import run_cli

    where = tmp_path_factory.mktemp("show-report")
    out, png = where / "report", where / "sheet.png"
    proc = run_cli(
        "show", str(hostile_dataset.root), "--out", str(out), "--png", str(png), "--json",
        "--samples", str(SHOWN), "--seed", str(SEED), "--image-size", "64",
        "--field", "caption=txt", "--field", "note=json:note", "-q",
    )  # fmt: skip
    return CliReport(out, png, json.loads(proc.stdout))
