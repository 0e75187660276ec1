"""Every sample of a data set carries the same members (issue: Hugging Face ``datasets`` takes its
columns from the first 5 samples and silently dropped the captions of later ones).

A listing with a caption column gives every sample ``KEY.txt`` (empty where the row has none);
HF datasets' own webdataset reader then yields every caption; ``wdstool verify`` warns, naming
the first offender, on other tools' shards whose samples carry different member sets; pack warns
when a listing's images come in several formats (the image member's extension differs).
"""

from __future__ import annotations

import json
import logging
import tarfile
from pathlib import Path

import pytest
import webdataset as wds

from shard_writer.pack import PackOptions, pack
from shard_writer.verify import verify_dataset
from tests.conftest import jpeg_bytes, png_bytes, run_cli
from tests.shard_writer.test_interop import run_hf_offline
from tests.shard_writer.test_listing import image_rows, write_listing
from wdstool.base.errors import DestinationError

N = 12
# the first five rows (the samples HF datasets infers its columns from) have no caption
CAPTIONS = [None, "", None, "", None] + [f"a photo, number {i}" for i in range(5, N)]


@pytest.fixture(scope="module")
def captioned(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A listing whose caption column is empty or null in some rows, packed in row order (no
    shuffle); returns DEST and key -> the caption a reader should see ("" where none)."""
    root = tmp_path_factory.mktemp("captioned")
    rows = image_rows(root, N, seed=3, labels=["x", "y"])
    for r, caption in zip(rows, CAPTIONS, strict=True):
        r["caption"] = caption
    listing = write_listing(root / "list.jsonl", rows)
    dest = root / "ds"
    pack(str(listing), str(dest), PackOptions(workers=1, max_count=7, shuffle=False))
    keys = {}
    for shard in sorted(dest.glob("*.tar")):
        with tarfile.open(shard) as tf:
            for m in tf.getmembers():
                key, ext = m.name.split(".", 1)
                if ext == "txt":
                    keys[key] = tf.extractfile(m).read().decode("utf-8")
    return dest, keys


def test_every_sample_has_a_txt_member_empty_where_the_row_had_no_caption(captioned) -> None:
    from loaders import make_loader

    dest, captions = captioned
    assert len(captions) == N  # every sample has KEY.txt
    by_row = {int(k.split("_", 1)[0]): v for k, v in captions.items()}
    assert by_row == {i: c or "" for i, c in enumerate(CAPTIONS)}
    for shard in sorted(dest.glob("*.tar")):
        members: dict[str, set[str]] = {}
        with tarfile.open(shard) as tf:
            for m in tf.getmembers():
                key, ext = m.name.split(".", 1)
                members.setdefault(key, set()).add(ext)
        assert all(exts == {"jpg", "cls", "txt", "json"} for exts in members.values())
    report = verify_dataset(str(dest))
    assert report["member_sets"] == {
        "consistent": True,
        "members": ["cls", "jpg", "json", "txt"],
        "first_offender": None,
    }
    assert report["warnings"] == []
    # our loader: an empty KEY.txt is the empty string ("no caption"), as other readers see it
    loader = make_loader(
        str(dest), 5, image_size=16, shuffle=False, num_workers=0, fields={"caption": "txt"}
    )
    got = {k: c for b in loader for k, c in zip(b["keys"], b["caption"], strict=True)}
    assert got == captions


_HF_SCRIPT = """
import json, sys
import datasets
files = json.loads(sys.argv[1])
ds = datasets.load_dataset("webdataset", data_files={"train": files}, split="train", streaming=True)
print(json.dumps([[s["__key__"], s["txt"], s["cls"]] for s in ds.decode(False)]))
"""


def test_hf_datasets_yields_every_caption(captioned, tmp_path: Path) -> None:
    dest, captions = captioned
    got = run_hf_offline(_HF_SCRIPT, [str(p) for p in sorted(dest.glob("*.tar"))], tmp_path)
    assert len(got) == N
    assert {key: txt for key, txt, _ in got} == captions
    assert sum(1 for _, txt, _ in got if txt) == N - 5  # all 7 captions, none dropped


def test_an_empty_caption_column_is_another_dataset_than_none(tmp_path: Path) -> None:
    """An all-empty caption column gives other shard bytes (empty KEY.txt) than no column:
    another fingerprint, so neither passes for the other's interrupted pack or DEST."""
    rows = image_rows(tmp_path, 4, seed=4)
    dest = tmp_path / "ds"
    pack(str(write_listing(tmp_path / "a.jsonl", rows)), str(dest), PackOptions(workers=1))
    for r in rows:
        r["caption"] = None
    with pytest.raises(DestinationError, match="a different dataset"):
        pack(str(write_listing(tmp_path / "b.jsonl", rows)), str(dest), PackOptions(workers=1))


def test_verify_warns_naming_the_first_sample_with_other_members(tmp_path: Path) -> None:
    """Shards another tool wrote (upstream webdataset's TarWriter), one sample without .txt."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    shardlist = []
    for s in range(2):
        name = f"part-{s}.tar"
        with wds.TarWriter(str(folder / name)) as sink:
            for i in range(3):
                sample = {"__key__": f"s{s}k{i}", "jpg": jpeg_bytes(10 * s + i), "cls": b"1"}
                if (s, i) != (1, 1):
                    sample["txt"] = f"caption {s} {i}"
                sink.write(sample)
        shardlist.append({"url": name, "nsamples": 3})
    (folder / "index.json").write_text(
        json.dumps({"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": shardlist})
    )
    proc = run_cli("verify", str(folder), "--json")  # a warning: exit 0
    report = json.loads(proc.stdout)
    assert report["ok"] and not report["member_sets"]["consistent"]
    assert report["member_sets"]["first_offender"] == {
        "url": str(folder / "part-1.tar"),
        "key": "s1k1",
        "members": ["cls", "jpg"],
    }
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("Warning: ")]
    assert warnings == [f"Warning: {report['warnings'][0]}"]
    assert (
        "part-1.tar: sample 's1k1' has members .cls .jpg, the first sample ('s0k0'" in (warnings[0])
    )
    assert "has .cls .jpg .txt" in warnings[0]


def test_pack_warns_when_images_come_in_several_formats(tmp_path: Path, caplog) -> None:
    rows = image_rows(tmp_path, 5, seed=6)
    (tmp_path / "odd.png").write_bytes(png_bytes(1))
    rows.append({"path": "odd.png"})
    listing = write_listing(tmp_path / "l.csv", rows)
    with caplog.at_level(logging.WARNING, logger="shard_writer.pack"):
        pack(str(listing), str(tmp_path / "mixed"), PackOptions(workers=1))
    assert [r.getMessage() for r in caplog.records] == [
        f"{listing}: the images are in 2 formats (5 KEY.jpg, 1 KEY.png), so samples carry "
        "different image members; readers that take their columns from the first samples "
        "(Hugging Face datasets) miss the others. quality=Q re-encodes every image as JPEG "
        "(KEY.jpg)"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shard_writer.pack"):
        pack(str(listing), str(tmp_path / "one"), PackOptions(workers=1, quality=90))
    assert caplog.records == []
    assert verify_dataset(str(tmp_path / "one"))["member_sets"]["members"] == ["jpg", "json"]
