"""`wdstool index ROOT --timm`: ROOT/_info.json, read by timm's own webdataset reader
(``timm.data.create_dataset("wds/NAME", root=ROOT, split=...)``, as timm's train.py calls it)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from shard_writer.pack import PackOptions, pack
from shard_writer.timm_index import write_timm_info
from tests.conftest import make_tree, run_cli
from wdstool.base.errors import InputError, ShardError

pytest.importorskip("timm", reason="timm is not installed (pip install -e '.[dev]')")


def _pixels(img) -> str:
    return hashlib.sha256(img.convert("RGB").tobytes()).hexdigest()


def tar_order(shard: Path) -> list[tuple[int, str]]:
    """(label, sha256 of the decoded RGB pixels) per sample, in the shard's order."""
    from PIL import Image

    keys, images, labels = [], {}, {}
    with tarfile.open(shard) as tf:
        for m in tf.getmembers():
            key, ext = m.name.split(".", 1)
            if ext == "jpg":
                images[key] = tf.extractfile(m).read()
                keys.append(key)
            elif ext == "cls":
                labels[key] = int(tf.extractfile(m).read())
    return [(labels[k], _pixels(Image.open(io.BytesIO(images[k])))) for k in keys]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """ROOT/train (3 shards) and ROOT/validation (2 shards, --prefix validation), as the README
    tells a timm user to pack them, plus a folder that is no data set."""
    base = tmp_path_factory.mktemp("timm")
    root = base / "root"
    train = make_tree(base / "images" / "train", {"ant": 5, "bee": 4, "cow": 3}, seed=1)
    val = make_tree(base / "images" / "val", {"ant": 2, "bee": 2, "cow": 3}, seed=2)
    pack(str(train), str(root / "train"), PackOptions(workers=1, max_count=5))
    pack(
        str(val), str(root / "validation"), PackOptions(workers=1, max_count=4, prefix="validation")
    )
    (root / "notes").mkdir()
    return root


def test_timm_reads_both_splits_through_our_info_json(root: Path) -> None:
    from timm.data import create_dataset

    summary = json.loads(run_cli("index", str(root), "--timm", "--json").stdout)
    assert summary == {
        "info": f"{root}/_info.json",
        "splits": {
            "train": {"num_samples": 12, "num_shards": 3},
            "validation": {"num_samples": 7, "num_shards": 2},
        },
    }
    info = json.loads((root / "_info.json").read_text())
    assert info["splits"]["validation"] == {
        "name": "validation",
        "num_samples": 7,
        "filenames": ["validation/validation-000000.tar", "validation/validation-000001.tar"],
        "shard_lengths": [4, 3],
    }
    expected = {
        split: [s for f in info["splits"][split]["filenames"] for s in tar_order(root / f)]
        for split in ("train", "validation")
    }
    # what timm's train.py does with --dataset wds/ours --data-dir ROOT (default splits)
    val = create_dataset("wds/ours", root=str(root), split="validation", is_training=False)
    got = [(int(target), _pixels(img)) for img, target in val]
    assert got == expected["validation"]  # in shard order, every sample once, same pixels
    train = create_dataset(
        "wds/ours", root=str(root), split="train", is_training=True, batch_size=1, seed=0
    )
    assert len(train) == 12
    got = [(int(target), _pixels(img)) for img, target in train]  # one shuffled epoch
    assert Counter(got) == Counter(expected["train"]) and len(got) == 12


def test_errors_name_root_and_write_nothing(root: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=f"^{re.escape(str(tmp_path))}/missing: no such folder$"):
        write_timm_info(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    with pytest.raises(InputError, match="no packed data set in a folder under it"):
        write_timm_info(str(empty))
    # ROOT that is itself a data set: the hint says to pack into folders under it
    with pytest.raises(InputError, match="it holds one itself"):
        write_timm_info(str(root / "train"))
    bad = tmp_path / "bad"
    (bad / "train").mkdir(parents=True)
    (bad / "train" / "index.json").write_text("{not json")
    with pytest.raises(
        ShardError, match=f"^{re.escape(str(bad))}/train/index.json: not a valid JSON manifest"
    ):
        write_timm_info(str(bad))
    assert not (bad / "_info.json").exists() and not (empty / "_info.json").exists()
    proc = run_cli("index", str(root), "--timm", "--out", str(tmp_path), check=False)
    assert proc.returncode == 2
    assert proc.stderr == "Error: --out applies to --dali; timm reads _info.json from ROOT itself\n"
