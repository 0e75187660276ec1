"""`pack`/`reshard --restart-markers`: large JPEGs rewritten with restart intervals, losslessly;
what the manifest and the summary say; the loader's batches over marked shards equal its
batches over the originals; other readers (PIL, torchvision, upstream webdataset) see the same
pixels; bad files keep the usual verdicts."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import wdstool.format.restart as restart
from shard_writer.options import PackOptions
from shard_writer.sample_data import render
from tests.conftest import jpeg_bytes, run_cli
from tests.support.tar_reference import dataset_samples
from wdstool.format.decode import decode_rgb

pytestmark = pytest.mark.skipif(not restart.available(), reason="_jpegtran not built")
LARGE = (1400, 1000)  # 1.1-1.7 MP (sample-data varies each side by ~11%): above MIN_PIXELS


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(the tree: 4 large and 3 small JPEGs, its plain pack, its pack with restart markers)."""
    root = tmp_path_factory.mktemp("restart")
    tree = root / "tree"
    for i in range(7):
        d = tree / ("big" if i < 4 else "small")
        d.mkdir(parents=True, exist_ok=True)
        data = render(1, i, 10, LARGE) if i < 4 else jpeg_bytes(i, (96, 80))
        (d / f"{i}.jpg").write_bytes(data)
    plain, marked = root / "plain", root / "marked"
    run_cli("pack", str(tree), str(plain), "--max-count", "3", "-q")
    proc = run_cli(
        "pack", str(tree), str(marked), "--max-count", "3", "--restart-markers", "--json"
    )
    summary = json.loads(proc.stdout)
    assert summary["restart_markers"] == {"added": 4, "kept": {"under 1,000,000 pixels": 3}}
    return tree, plain, marked


def _images(dataset: Path) -> dict[str, bytes]:
    return {key: dict(members)[".jpg"] for key, members in dataset_samples(dataset)}


def test_pack_rewrites_large_jpegs_losslessly_and_records_it(packed) -> None:
    _tree, plain, marked = packed
    before, after = _images(plain), _images(marked)
    assert before.keys() == after.keys()
    for key, data in after.items():
        if restart.restart_layout(data) is None:  # a small image: its own bytes
            assert data == before[key]
            continue
        assert data != before[key]
        assert torch.equal(decode_rgb(data), decode_rgb(before[key])), key
        pil = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in (data, before[key])]
        assert np.array_equal(*pil)
    assert sum(restart.restart_layout(d) is not None for d in after.values()) == 4
    options = json.loads((marked / "index.json").read_text())["pack_options"]
    assert options["restart_markers"] == {"target_width": 64, "min_pixels": 1_000_000}
    assert "restart_markers" not in PackOptions().recorded()  # old fingerprints unchanged
    run_cli("verify", str(marked), "--decode")
    # deterministic: a second run finds the data set complete
    again = json.loads(run_cli("pack", str(_tree), str(marked), "--max-count", "3",
                               "--restart-markers", "--json").stdout)  # fmt: skip
    assert again["up_to_date"]


def test_the_loader_gives_the_same_batches_from_marked_shards(packed, tmp_path: Path) -> None:
    """Through the region decoder (marked) and the partial decoder (plain): the same keys and
    the same pixels, batch for batch, train and eval; a reshard of the plain shards with
    --restart-markers gives the pack's bytes."""
    from loaders import make_loader

    _tree, plain, marked = packed
    for train in (True, False):
        batches = [
            list(make_loader(str(d), 4, num_workers=0, seed=3, image_size=96, train=train))
            for d in (plain, marked)
        ]
        assert len(batches[0]) == len(batches[1]) == 2
        for a, b in zip(*batches, strict=True):
            assert a["keys"] == b["keys"]
            assert torch.equal(a["pixel_values"], b["pixel_values"])
    resharded = tmp_path / "resharded"
    run_cli("reshard", str(plain), str(resharded), "--restart-markers", "-q")
    assert _images(resharded) == _images(marked)


def test_upstream_webdataset_reads_marked_shards(packed) -> None:
    import webdataset as wds

    _tree, plain, marked = packed
    seen = {}
    for folder in (plain, marked):
        urls = [str(p) for p in sorted(folder.glob("*.tar"))]
        ds = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("rgb8")
        seen[folder] = {s["__key__"]: s["jpg"] for s in ds}
    assert seen[plain].keys() == seen[marked].keys()
    for key, img in seen[marked].items():
        assert np.array_equal(img, seen[plain][key]), key


def test_a_truncated_marked_file_gets_the_usual_error_or_replacement(packed, tmp_path) -> None:
    """A marked JPEG whose second half is lost (zeros up to the end, as a cut download padded
    to its size): the loader's usual one-line error naming the sample under on_error="raise",
    a counted replacement under "skip", wherever the crop lies."""
    from loaders import make_loader
    from wdstool.base.errors import WdsToolError

    tree, _plain, _marked = packed
    bad_tree = tmp_path / "tree"
    for p in tree.rglob("*.jpg"):
        (bad_tree / p.parent.name).mkdir(parents=True, exist_ok=True)
        (bad_tree / p.parent.name / p.name).write_bytes(p.read_bytes())
    dest = tmp_path / "marked"
    run_cli("pack", str(bad_tree), str(dest), "--restart-markers", "--no-shuffle", "-q")
    shard = next(dest.glob("*.tar"))
    raw = bytearray(shard.read_bytes())
    first = next(iter(_images(dest).values()))
    at = bytes(raw).index(first)
    cut = slice(at + len(first) // 2, at + len(first))
    raw[cut] = bytes(cut.stop - cut.start)  # its second half lost, as in a cut download
    shard.write_bytes(bytes(raw))
    with pytest.raises(WdsToolError, match=r"train-000000.tar: sample '\w+': cannot decode JPEG"):
        list(make_loader(str(dest), 7, num_workers=0, image_size=64))
    loader = make_loader(str(dest), 7, num_workers=0, image_size=64, on_error="skip")
    assert sum(len(b["keys"]) for b in loader) == 7
    assert loader.stats().all_epochs.samples_replaced == 1


def test_hub_parquet_images_get_restart_markers_too(tmp_path: Path) -> None:
    """Images inside a parquet column (the Hub's layout) go through the same rewrite: the large
    ones marked, the small one kept, the pixels the original's, the counts in the summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    images = [render(1, i, 10, LARGE) for i in range(2)] + [jpeg_bytes(5, (80, 60))]
    pq.write_table(pa.table({"img": images, "label": [0, 1, 0]}), tmp_path / "raw.parquet")
    dest = tmp_path / "ds"
    proc = run_cli(
        "pack", str(tmp_path / "raw.parquet"), str(dest), "--image-column", "img",
        "--restart-markers", "--json",
    )  # fmt: skip
    assert json.loads(proc.stdout)["restart_markers"] == {
        "added": 2,
        "kept": {"under 1,000,000 pixels": 1},
    }
    got = {int(k.removeprefix("raw-")): dict(m)[".jpg"] for k, m in dataset_samples(dest)}
    for i, original in enumerate(images):
        assert (restart.restart_layout(got[i]) is not None) == (i < 2)
        assert torch.equal(decode_rgb(got[i]), decode_rgb(original))
