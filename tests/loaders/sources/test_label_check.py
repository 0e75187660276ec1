"""``label=`` is checked when make_loader is called, not at the first batch inside a worker:
against the manifest's classes, else the first sample's members (one read of the first
shard's headers). Caption-only shards with the default ``label="cls"`` are a one-line
ConfigError naming the shard and the fix (``label=None``)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import webdataset as wds
from PIL import Image

from loaders import Source, make_loader
from shard_writer import ReshardOptions, reshard
from wdstool.base.errors import ConfigError


def _jpeg(i: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 24), (40 * i % 256, 80, 120)).save(out, "JPEG")
    return out.getvalue()


def write_tar(path: Path, *, cls: bool = False, txt: bool = True, meta: bool = False) -> Path:
    """Four samples as upstream webdataset's TarWriter writes them (no index.json)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with wds.TarWriter(str(path)) as w:
        for i in range(4):
            sample = {"__key__": f"{path.stem}-{i:04d}", "jpg": _jpeg(i)}
            if txt:
                sample["txt"] = f"caption {i}"
            if cls:
                sample["cls"] = i % 2
            if meta:
                sample["json"] = {"class_id": i % 3}
            w.write(sample)
    return path


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write_tar(tmp_path / "first_plain.tar")
    write_tar(tmp_path / "lab" / "lab.tar", cls=True, txt=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _load(source, **kw):
    return make_loader(source, 2, image_size=16, num_workers=0, shuffle=False, **kw)


def test_caption_only_tar_with_the_default_label_fails_at_the_call(here: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load("first_plain.tar")
    msg = err.value.message
    assert "\n" not in msg and msg.startswith("first_plain.tar: ")
    assert "no .cls member" in msg and "label=None" in msg and ".jpg .txt" in msg
    # the fix it names works
    batches = list(_load("first_plain.tar", label=None, fields={"caption": "txt"}))
    assert sum(len(b["keys"]) for b in batches) == 4
    assert all("labels" not in b for b in batches)


def test_a_manifest_without_classes_is_checked_against_the_first_shard(here: Path) -> None:
    reshard(["first_plain.tar"], "captions", ReshardOptions(workers=1))
    assert json.loads((here / "captions" / "index.json").read_text())["classes"] == []
    with pytest.raises(ConfigError, match=r"captions/.*\.tar: .*no \.cls member.*label=None"):
        _load("captions")
    # integer labels without class names: the manifest lists none, the shards have .cls
    reshard(["lab"], "ints", ReshardOptions(workers=1))
    batches = list(_load("ints"))
    assert sorted(int(x) for b in batches for x in b["labels"]) == [0, 0, 1, 1]


def test_a_json_label_needs_a_json_member(here: Path) -> None:
    with pytest.raises(ConfigError, match=r"first_plain.tar: .*no \.json member.*label=None"):
        _load("first_plain.tar", label="json:class_id")
    write_tar(here / "meta.tar", meta=True)
    batches = list(_load("meta.tar", label="json:class_id"))
    assert sorted(int(x) for b in batches for x in b["labels"]) == [0, 0, 1, 2]


def test_mixture_sources_are_checked_each_with_its_own_label(here: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load([Source("lab"), Source("first_plain.tar")])
    msg = err.value.message
    assert msg.startswith("source[1] first_plain.tar: ") and "label=None" in msg
    assert "\n" not in msg
    batches = list(_load([Source("lab"), Source("first_plain.tar", label=None)]))
    assert sum(len(b["keys"]) for b in batches) == 8
