"""Every kind of bad input, under --on-error skip (left out, listed) and raise (one line,
nothing published; "fail", its older name, still works)."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import pytest
import webdataset as wds

from tests.conftest import jpeg_bytes, make_tree, run_cli


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height (an image bomb if huge)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", len(ihdr))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
        + struct.pack(">I", 0)
        + b"IEND"
        + struct.pack(">I", zlib.crc32(b"IEND"))
    )


BAD = {
    # relative path -> (how to create it, expected reason fragment)
    "cat/corrupt.jpg": (
        lambda p: p.write_bytes(b"\xff\xd8\xff\xe0garbage" * 10),
        "unreadable image header",
    ),
    "cat/truncated.jpg": (lambda p: p.write_bytes(jpeg_bytes(3)[:400]), "truncated"),
    "cat/zero.jpg": (lambda p: p.write_bytes(b""), "empty file"),
    "dog/text.png": (lambda p: p.write_text("this is not a png"), "not an image"),
    "dog/broken.jpg": (lambda p: os.symlink(p.parent / "does-not-exist.jpg", p), "broken symlink"),
    "dog/loop.jpg": (lambda p: os.symlink(p, p), "symlink loop"),
    "dog/bomb.png": (lambda p: p.write_bytes(_png_claiming(100_000, 100_000)), "too large"),
    "empty": (lambda p: p.mkdir(), "empty class folder"),
}


@pytest.fixture
def bad_tree(tmp_path: Path) -> Path:
    src = make_tree(tmp_path / "src", {"cat": 4, "dog": 3})
    for rel, (create, _reason) in BAD.items():
        create(src / rel)
    # odd but valid names are packed, not skipped
    (src / "dog" / "sp ace,é.jpg").write_bytes(jpeg_bytes(11))
    os.makedirs(os.fsencode(src / "cat"), exist_ok=True)
    with open(os.path.join(os.fsencode(src / "cat"), b"bad-\xff\xfe-utf8.jpg"), "wb") as f:
        f.write(jpeg_bytes(12))
    return src


def test_skip_policy_leaves_bad_inputs_out_and_lists_them(bad_tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    r = run_cli("pack", str(bad_tree), str(dest), "--json", "--workers", "2", "--max-count", "3")
    summary = json.loads(r.stdout)
    reasons = {s["path"]: s["reason"] for s in summary["skipped"]}
    for rel, (_create, fragment) in BAD.items():
        assert rel in reasons, rel
        assert fragment in reasons[rel].lower(), (rel, reasons[rel])
    assert summary["samples"] == 4 + 3 + 2
    manifest = json.loads((dest / "index.json").read_text())
    assert {s["path"] for s in manifest["skipped"]} == set(reasons)
    assert "empty" in manifest["classes"]  # class index kept, as torchvision does
    paths = set()
    for e in manifest["shardlist"]:
        for s in wds.WebDataset(str(dest / e["url"]), shardshuffle=False):
            paths.add(json.loads(s["json"])["path"])
            assert "." not in s["__key__"]
    assert "dog/sp ace,é.jpg" in paths
    assert "cat/bad-\\xff\\xfe-utf8.jpg" in paths


@pytest.mark.parametrize(
    ("rel", "word"),  # half the cases say raise, half its older name: both must behave alike
    [(rel, ("raise", "fail")[i % 2]) for i, rel in enumerate(sorted(BAD))],
)
def test_raise_policy_names_the_file_and_publishes_nothing(
    rel: str, word: str, tmp_path: Path
) -> None:
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    create, _fragment = BAD[rel]
    create(src / rel)
    dest = tmp_path / "out"
    r = run_cli(
        "pack",
        str(src),
        str(dest),
        "--on-error",
        word,
        "--workers",
        "2",
        "--max-count",
        "2",
        check=False,
    )
    assert r.returncode != 0
    err = r.stderr.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert rel.split("/")[-1] in err
    assert not (dest / "index.json").exists()
    leftovers = [p.name for p in dest.glob("*")] if dest.exists() else []
    assert not [n for n in leftovers if ".tmp-" in n]


def test_one_on_error_vocabulary_for_writers_and_loaders(tmp_path: Path) -> None:
    """pack, reshard and the loader take the same two words; a writer still records "fail" for
    raise in index.json (the word it recorded before), so data sets written then keep their
    fingerprint and a rerun over them is still the same data set."""
    from loaders.config import BatchSettings
    from shard_writer import OnError, PackOptions, ReshardOptions, pack
    from wdstool.base.errors import ConfigError

    assert [e.value for e in OnError] == ["raise", "skip"]
    assert PackOptions().on_error is OnError.SKIP and ReshardOptions().on_error is OnError.RAISE
    assert BatchSettings(on_error="skip").on_error is OnError.SKIP
    assert PackOptions(on_error="raise").on_error is OnError.RAISE
    with pytest.raises(ConfigError, match=r"^on_error='fail' is not one of 'raise', 'skip'$"):
        PackOptions(on_error="fail")  # the CLI's alias only; the library has one word per policy
    with pytest.raises(ConfigError, match=r"^on_error='fail' is not one of 'raise', 'skip'$"):
        BatchSettings(on_error="fail")
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 2})
    pack(str(src), str(tmp_path / "out"), PackOptions(on_error=OnError.RAISE, workers=1))
    manifest = json.loads((tmp_path / "out" / "index.json").read_text())
    assert manifest["pack_options"]["on_error"] == "fail"


def test_verify_decode_catches_corrupt_data_behind_a_valid_header(tmp_path: Path) -> None:
    import io

    from PIL import Image

    src = make_tree(tmp_path / "src", {"a": 3})
    buf = io.BytesIO()
    Image.effect_noise((120, 90), 40).convert("RGB").save(buf, "PNG")
    data = bytearray(buf.getvalue())
    idat = data.find(b"IDAT")
    for k in range(idat + 40, idat + 60):  # damage the compressed pixels, keep header and IEND
        data[k] ^= 0x55
    (src / "a" / "damaged.png").write_bytes(bytes(data))
    plain = run_cli("pack", str(src), str(tmp_path / "o1"), "--json")
    assert json.loads(plain.stdout)["samples"] == 4  # header-level checks cannot see it
    deep = run_cli("pack", str(src), str(tmp_path / "o2"), "--json", "--verify-decode")
    skipped = json.loads(deep.stdout)["skipped"]
    assert [s["path"] for s in skipped] == ["a/damaged.png"]
    assert "corrupt image data" in skipped[0]["reason"]


def test_truncated_jpeg_with_exif_thumbnail_is_caught_without_decoding(tmp_path: Path) -> None:
    import io

    from PIL import Image

    thumb = io.BytesIO()
    Image.new("RGB", (16, 12), (200, 10, 10)).save(thumb, "JPEG")
    exif = Image.Exif()
    big = io.BytesIO()
    Image.effect_noise((300, 200), 50).convert("RGB").save(big, "JPEG", exif=exif.tobytes())
    data = big.getvalue()
    # splice a thumbnail-like JPEG (with its own EOI) into an APP segment, then truncate
    app = b"\xff\xe5" + (len(thumb.getvalue()) + 2).to_bytes(2, "big") + thumb.getvalue()
    spliced = data[:2] + app + data[2:]
    src = make_tree(tmp_path / "src", {"a": 2})
    (src / "a" / "cut.jpg").write_bytes(spliced[: len(spliced) // 2])
    r = run_cli("pack", str(src), str(tmp_path / "o"), "--json")
    skipped = json.loads(r.stdout)["skipped"]
    assert [s["path"] for s in skipped] == ["a/cut.jpg"]
    assert "truncated" in skipped[0]["reason"]
