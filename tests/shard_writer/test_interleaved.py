"""`wdstool pack` of listings of documents (several images and texts a row: OBELICS-style
parallel lists, LLaVA-style <image> markers), JSON Lines and parquet: real images into real
shards, read back with upstream webdataset and our tar reader; the manifest's facts are the
images' real sizes; a bad row is one line naming it, and nothing is published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from PIL import Image

from shard_writer.pack import PackOptions, pack
from shard_writer.verify import verify_dataset
from tests.conftest import dir_bytes, run_cli
from tests.support.interleaved import expected, llava_rows, obelics_rows, write_rows
from wdstool.base.errors import ConfigError, ShardError
from wdstool.format.manifest import parse_manifest
from wdstool.format.tar_read import TarSampleReader


def _read(dest: Path) -> tuple[dict, list[tuple[str, dict[str, bytes], str]]]:
    """The manifest and every sample (key, members, shard) in shard order, with upstream
    webdataset; our tar reader must group the same members into the same samples."""
    manifest = json.loads((dest / "index.json").read_text())
    out = []
    for entry in manifest["shardlist"]:
        shard = str(dest / entry["url"])
        theirs = [
            (s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")})
            for s in wds.WebDataset(shard, shardshuffle=False)
        ]
        with open(shard, "rb") as f:
            ours = [(s.key, dict(s.parts)) for s in TarSampleReader(f, shard)]
        assert ours == theirs
        out += [(k, parts, entry["url"]) for k, parts in theirs]
    assert len(out) == manifest["num_samples"]
    return manifest, out


def _check(root: Path, dest: Path, rows: list[dict[str, Any]], text: str | None) -> None:
    """Every row is one sample whose members, lists and manifest facts are the row's."""
    manifest, got = _read(dest)
    want = expected(rows, text)
    facts: dict[str, list[tuple[int, list[list[int]], int]]] = {}
    for entry in manifest["shardlist"]:
        il, at = entry["interleaved"], 0
        facts[entry["url"]] = []
        for n, chars in zip(il["images"], il["chars"], strict=True):
            facts[entry["url"]].append((n, il["sizes"][at : at + n], chars))
            at += n
        assert at == len(il["sizes"])
    seen = []
    for key, parts, shard in got:
        row = int(key.split("_", 1)[0])
        seen.append(row)
        meta = json.loads(parts["json"])
        assert meta["texts"] == want[row]["texts"] and meta["paths"] == want[row]["paths"]
        numbered = [m for m in meta["images"] if m is not None]
        assert [i for i in meta["images"] if i is not None] == numbered
        assert sorted(parts) == sorted([*numbered, "json"])
        sizes = []
        for n, (member, path) in enumerate(zip(numbered, want[row]["paths"], strict=True)):
            source = (root / path).read_bytes()
            assert member == f"{n}.{'png' if path.endswith('.png') else 'jpg'}"
            assert parts[member] == source  # the original bytes
            sizes.append(list(Image.open(root / path).size))
        n, manifest_sizes, chars = facts[shard].pop(0)
        assert n == len(numbered) and manifest_sizes == sizes
        assert chars == sum(len(t) for t in meta["texts"] if t is not None)
        assert all(
            (t is None) != (i is None) for t, i in zip(meta["texts"], meta["images"], strict=True)
        )
        extra = {k: v for k, v in rows[row].items() if k not in ("images", "texts", text)}
        assert {k: meta[k] for k in extra} == extra
    assert sorted(seen) == list(range(len(rows)))
    total = manifest["interleaved"]
    assert total == {
        "samples": len(rows),
        "images": sum(len(w["paths"]) for w in want),
        "chars": sum(len(t) for w in want for t in w["texts"] if t is not None),
    }
    report = verify_dataset(str(dest), decode=True)
    assert report["ok"] and report["num_images"] == total["images"]
    assert report["member_sets"]["consistent"], report["warnings"]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_obelics_rows_pack_into_numbered_images_and_parallel_lists(
    tmp_path: Path, suffix: str
) -> None:
    rows = obelics_rows(tmp_path, 9)
    listing = write_rows(tmp_path / f"docs{suffix}", rows)
    dest = tmp_path / "out"
    summary = pack(str(listing), str(dest), PackOptions(workers=1, max_count=4))
    assert summary.shards == 3 and summary.samples == 9
    _check(tmp_path, dest, rows, None)
    # the manifest is canonical and reads back as it was written; its lists take a line each
    raw = (dest / "index.json").read_bytes()
    assert parse_manifest(raw, "index.json").dumps() == raw
    assert raw.count(b'   "sizes": [[') == 3  # one line per shard
    # the same listing, other workers: the same bytes
    again = tmp_path / "again"
    pack(str(listing), str(again), PackOptions(workers=2, max_count=4))
    assert dir_bytes(again) == dir_bytes(dest)


@pytest.mark.parametrize(("suffix", "column"), [(".jsonl", "caption"), (".parquet", "text")])
def test_llava_rows_split_at_image_markers(tmp_path: Path, suffix: str, column: str) -> None:
    rows = llava_rows(tmp_path, 7, column=column)
    listing = write_rows(tmp_path / f"chat{suffix}", rows)
    dest = tmp_path / "out"
    pack(str(listing), str(dest), PackOptions(workers=1, max_count=3, shuffle=False))
    _check(tmp_path, dest, rows, column)
    _, got = _read(dest)
    first = json.loads(got[0][1]["json"])  # "<image>\nPicture 0: what is it?"
    assert first["texts"] == [None, "\nPicture 0: what is it?"]
    assert first["images"] == ["0.jpg", None]
    no_markers = json.loads(got[2][1]["json"])  # images first, then the text
    assert [m and m.split(".")[0] for m in no_markers["images"]] == ["0", "1", "2", None]
    assert no_markers["texts"] == [None, None, None, "Describe these 3 pictures."]


def test_images_column_option_and_labels(tmp_path: Path) -> None:
    rows = obelics_rows(tmp_path, 5)
    for i, row in enumerate(rows):
        row["pictures"] = row.pop("images")
        row["label"] = ["cat", "dog"][i % 2]
    listing = write_rows(tmp_path / "docs.jsonl", rows)
    dest = tmp_path / "out"
    run_cli("pack", str(listing), str(dest), "--images-column", "pictures", "-q")
    manifest, got = _read(dest)
    assert manifest["classes"] == ["cat", "dog"]
    for key, parts, _ in got:
        row = int(key.split("_", 1)[0])
        meta = json.loads(parts["json"])
        assert parts["cls"] == str(row % 2).encode() and meta["class"] == ["cat", "dog"][row % 2]
        assert "pictures" not in meta and meta["url"] == rows[row]["url"]
    with pytest.raises(ConfigError, match="choose one"):
        PackOptions(path_column="path", images_column="pictures")


def _one_line(tmp_path: Path, listing: Path, *extra: str) -> str:
    dest = tmp_path / "failed"
    r = run_cli("pack", str(listing), str(dest), "--workers", "1", *extra, check=False)
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr
    shards = list(dest.rglob("*.tar")) if dest.exists() else []
    assert not shards and not (dest / "index.json").exists()  # nothing under a final name
    return r.stderr.strip()


def test_bad_rows_are_one_line_naming_the_row_and_nothing_is_published(tmp_path: Path) -> None:
    rows = llava_rows(tmp_path, 4)
    rows[2]["caption"] = "<image> only one marker for three images"  # row 3: 3 images
    rows[2]["images"].append(rows[0]["images"][0])
    msg = _one_line(tmp_path, write_rows(tmp_path / "markers.jsonl", rows))
    assert "markers.jsonl: row 3: 'caption' has 1 <image> marker(s) for" in msg

    rows = obelics_rows(tmp_path, 4)
    rows[1]["texts"].append("one too many")
    msg = _one_line(tmp_path, write_rows(tmp_path / "lengths.parquet", rows))
    assert "lengths.parquet: row 2: 'texts' has" in msg

    rows = obelics_rows(tmp_path, 4)
    missing = [p for p in rows[3]["images"] if p is not None][-1]
    (tmp_path / missing).unlink()
    listing = write_rows(tmp_path / "missing.jsonl", rows)
    msg = _one_line(tmp_path, listing, "--on-error", "raise")
    assert msg.startswith(f"Error: {listing}: row 4: ") and msg.endswith(": missing file")
    assert missing in msg
    # skip leaves the whole row out and lists it; the other rows are packed
    dest = tmp_path / "skipped"
    summary = pack(str(listing), str(dest), PackOptions(workers=1))
    assert summary.samples == 3 and summary.skipped == [
        {"row": 4, "path": missing, "reason": "missing file"}
    ]
    _, got = _read(dest)
    assert sorted(int(k.split("_", 1)[0]) for k, _, _ in got) == [0, 1, 2]

    (tmp_path / "l.csv").write_text("images,caption\na.jpg,x\n")
    assert "a CSV listing cannot hold a list of images" in _one_line(tmp_path, tmp_path / "l.csv")


def test_append_keeps_every_shards_facts_and_refuses_a_mix(tmp_path: Path, small_tree) -> None:
    dest = tmp_path / "out"
    first = write_rows(tmp_path / "a.jsonl", obelics_rows(tmp_path, 3, seed=1))
    second = write_rows(tmp_path / "b.jsonl", obelics_rows(tmp_path, 4, seed=2))
    pack(str(first), str(dest), PackOptions(workers=1))
    pack(str(second), str(dest), PackOptions(workers=1, append=True))
    manifest = json.loads((dest / "index.json").read_text())
    assert [len(e["interleaved"]["images"]) for e in manifest["shardlist"]] == [3, 4]
    assert manifest["interleaved"]["samples"] == 7
    assert verify_dataset(str(dest))["num_samples"] == 7
    with pytest.raises(ConfigError, match="samples of one image cannot be appended"):
        pack(str(small_tree), str(dest), PackOptions(workers=1, append=True))
    images = tmp_path / "images"
    pack(str(small_tree), str(images), PackOptions(workers=1))
    with pytest.raises(ConfigError, match="samples of several images cannot be appended"):
        pack(str(first), str(images), PackOptions(workers=1, append=True))


def test_verify_names_a_missing_or_extra_member_and_a_wrong_fact(tmp_path: Path) -> None:
    from wdstool.format.tar_write import END, write_member

    src = tmp_path / "docs.jsonl"
    write_rows(src, obelics_rows(tmp_path, 3))
    dest = tmp_path / "out"
    pack(str(src), str(dest), PackOptions(workers=1, shuffle=False))
    _, got = _read(dest)
    key, parts, _ = next(g for g in got if len([p for p in g[1] if p != "json"]) >= 2)

    def shard(members: dict[str, bytes]) -> Path:
        folder = tmp_path / f"hand-{len(list(tmp_path.glob('hand-*')))}"
        folder.mkdir()
        chunks: list[bytes] = []
        for ext, data in members.items():
            write_member(chunks.append, f"{key}.{ext}", data)
        (folder / "part-000000.tar").write_bytes(b"".join(chunks) + END)
        return folder

    missing = {k: v for k, v in parts.items() if k != "1.jpg" and k != "1.png"}
    with pytest.raises(ShardError, match=rf"part-000000.tar: sample '{key}': .*lacks"):
        verify_dataset(str(shard(missing)))
    extra = {**parts, "7.jpg": parts["0.jpg"]}
    with pytest.raises(ShardError, match=rf"sample '{key}': member .7.jpg is not named"):
        verify_dataset(str(shard(extra)))
    # the manifest's facts must be the shard's
    index = dest / "index.json"
    manifest = json.loads(index.read_text())
    manifest["shardlist"][0]["interleaved"]["sizes"][0] = [1, 1]
    index.write_text(json.dumps(manifest))
    with pytest.raises(ShardError, match=r"is \d+x\d+, the manifest says 1x1"):
        verify_dataset(str(dest))
    bad = json.loads(index.read_text())
    bad["shardlist"][0]["interleaved"]["images"] = [1]
    index.write_text(json.dumps(bad))
    with pytest.raises(ShardError, match="malformed manifest: 'interleaved'"):
        verify_dataset(str(dest))
