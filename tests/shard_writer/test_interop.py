"""Our shards in other readers: wids (random access through index.json), Hugging Face
`datasets` (streaming, offline), GNU tar, and DALI (only where it is installed). Upstream
`webdataset.WebDataset` is checked in test_pack.py.

The reference is what Python's tarfile sees in each shard plus what our own loader delivers.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import REPO, make_tree, run_cli


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("interop")
    src = make_tree(root / "src", {"ant": 6, "bee": 5, "cow": 4, "doe": 3}, seed=5)
    dest = root / "ds"
    run_cli("pack", str(src), str(dest), "--max-count", "5", "--workers", "1", "-q")
    return dest


def manifest(dest: Path) -> dict:
    return json.loads((dest / "index.json").read_text())


def tar_samples(shard: Path) -> list[tuple[str, dict[str, bytes]]]:
    """(key, {ext: bytes}) in archive order, read with Python's tarfile."""
    out: list[tuple[str, dict[str, bytes]]] = []
    with tarfile.open(shard) as tf:
        for m in tf.getmembers():
            key, ext = m.name.split(".", 1)
            if not out or out[-1][0] != key:
                out.append((key, {}))
            out[-1][1][ext] = tf.extractfile(m).read()
    return out


@pytest.fixture(scope="module")
def reference(dataset: Path) -> list[tuple[str, str, dict[str, bytes]]]:
    """(shard url, key, parts) for every sample in manifest order."""
    return [
        (e["url"], key, parts)
        for e in manifest(dataset)["shardlist"]
        for key, parts in tar_samples(dataset / e["url"])
    ]


@pytest.fixture(scope="module")
def our_labels(dataset: Path) -> dict[str, int]:
    """key -> label as our own loader delivers them (one epoch, no shuffling)."""
    from loaders import make_loader

    loader = make_loader(str(dataset), 4, image_size=16, train=False, shuffle=False, num_workers=0)
    labels: dict[str, int] = {}
    for batch in loader:
        labels.update(zip(batch["keys"], batch["labels"].tolist(), strict=True))
    return labels


def test_reference_is_what_the_manifest_says(dataset, reference, our_labels) -> None:
    m = manifest(dataset)
    assert len(reference) == m["num_samples"] == len(our_labels) == 18
    for e in m["shardlist"]:
        assert sum(1 for url, _, _ in reference if url == e["url"]) == e["nsamples"]
    assert {k: int(p["cls"]) for _, k, p in reference} == our_labels


@pytest.mark.filterwarnings("ignore:String specifications for transformations:UserWarning")
def test_wids_random_access_through_our_manifest(
    dataset: Path, reference, our_labels, tmp_path: Path
) -> None:
    import wids

    ds = wids.ShardListDataset(
        str(dataset / "index.json"), cache_dir=str(tmp_path / "wids"), transformations=[]
    )
    m = manifest(dataset)
    assert len(ds) == m["num_samples"]
    assert list(ds.lengths) == [e["nsamples"] for e in m["shardlist"]]
    order = list(range(len(ds)))
    random.Random(0).shuffle(order)  # random access, not a scan
    for i in order:
        sample = ds[i]
        url, key, parts = reference[i]
        assert sample["__key__"] == key
        assert Path(sample["__shard__"]).name == url
        assert {k for k in sample if not k.startswith("__")} == {f".{e}" for e in parts}
        for ext, data in parts.items():
            assert sample[f".{ext}"].getvalue() == data
        assert int(sample[".cls"].getvalue()) == our_labels[key]
    # wids' default decoding gives the same labels as ours
    decoded = wids.ShardListDataset(str(dataset / "index.json"), cache_dir=str(tmp_path / "w2"))
    assert [decoded[i][".cls"] for i in range(len(ds))] == [our_labels[k] for _, k, _ in reference]


_HF_SCRIPT = """
import hashlib, json, sys
import datasets
files = json.loads(sys.argv[1])
ds = datasets.load_dataset("webdataset", data_files={"train": files}, split="train", streaming=True)
out = []
for s in ds.decode(False):
    out.append([s["__key__"], s["__url__"], s["cls"], hashlib.sha256(s["jpg"]["bytes"]).hexdigest(),
                s["json"]["class_index"]])
print(json.dumps(out))
"""


def run_hf_offline(script: str, files: list[str], tmp_path: Path) -> list:
    """Run ``script`` (Hugging Face datasets, offline, its cache under tmp_path) in a new
    process with the shard files as its argument; the JSON its last line prints."""
    env = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps(files)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_hf_datasets_streams_every_sample_offline(
    dataset: Path, reference, our_labels, tmp_path: Path
) -> None:
    import hashlib

    files = [str(dataset / e["url"]) for e in manifest(dataset)["shardlist"]]
    got = run_hf_offline(_HF_SCRIPT, files, tmp_path)
    assert [(Path(u).name, k) for k, u, *_ in got] == [(u, k) for u, k, _ in reference]
    for (key, _, cls, digest, class_index), (_, _, parts) in zip(got, reference, strict=True):
        assert cls == class_index == our_labels[key]
        assert digest == hashlib.sha256(parts["jpg"]).hexdigest()


@pytest.mark.skipif(shutil.which("tar") is None, reason="no tar program")
def test_tar_lists_exactly_our_members_with_fixed_metadata(dataset: Path, reference) -> None:
    for e in manifest(dataset)["shardlist"]:
        shard = dataset / e["url"]
        proc = subprocess.run(
            ["tar", "-tvf", str(shard)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "TZ": "UTC", "LC_ALL": "C"},
        )
        lines = proc.stdout.splitlines()
        want = [
            (f"{key}.{ext}", len(data))
            for url, key, parts in reference
            if url == e["url"]
            for ext, data in parts.items()
        ]
        assert len(lines) == len(want) == 3 * e["nsamples"]
        for line, (name, size) in zip(lines, want, strict=True):
            mode, owner, size_s, date, time_s, listed = line.split()
            assert (mode, owner, date, time_s) == ("-r--r--r--", "0/0", "1970-01-01", "00:00")
            assert (listed, int(size_s)) == (name, size)
        with tarfile.open(shard) as tf:  # the same from the headers' own fields
            for m in tf.getmembers():
                assert (m.mode, m.uid, m.gid, m.mtime, m.uname, m.gname) == (0o444, 0, 0, 0, "", "")
                assert m.isreg()


def test_dali_reads_our_index_files(dataset: Path, reference, tmp_path: Path) -> None:
    """A real check with DALI's CPU webdataset reader where DALI is installed (it is not in the
    dev extra: ~1 GB); the .idx format itself is checked in test_index.py without it."""
    pytest.importorskip("nvidia.dali")
    import numpy as np
    from nvidia.dali import fn, pipeline_def

    out = tmp_path / "idx"
    run_cli("index", str(dataset), "--dali", "--out", str(out), "-q")
    shards = [e["url"] for e in manifest(dataset)["shardlist"]]

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        jpg, cls, meta = fn.readers.webdataset(
            paths=[str(dataset / s) for s in shards],
            index_paths=[str(out / s.replace(".tar", ".idx")) for s in shards],
            ext=["jpg", "cls", "json"],
            missing_component_behavior="error",
            random_shuffle=False,
            name="r",
        )
        return jpg, cls, meta

    p = pipe()
    p.build()
    assert p.epoch_size("r") == len(reference)
    for _, _, parts in reference:
        jpg, cls, meta = p.run()
        got = [np.array(t[0]).tobytes() for t in (jpg, cls, meta)]
        assert got == [parts["jpg"], parts["cls"], parts["json"]]


def test_our_bytes_are_what_every_reader_saw(dataset: Path, reference) -> None:
    """The reference itself: tarfile agrees with our own header-only reader, byte for byte."""
    from wdstool.format.tar_read import TarSampleReader

    ours = []
    for e in manifest(dataset)["shardlist"]:
        with open(dataset / e["url"], "rb") as f:
            ours += [(e["url"], s.key, s.parts) for s in TarSampleReader(f, e["url"])]
    assert ours == reference
    assert all(isinstance(p, dict) and set(p) == {"jpg", "cls", "json"} for _, _, p in ours)
