"""Shards as other tools write them, and what Python's tarfile reads back: the reference for
reshard, split and append tests.

``foreign_shards`` writes WebDataset shards the way users get them from elsewhere: upstream
webdataset's ``TarWriter`` and plain ``tarfile`` (members in odd orders, a sample split across two
shards, ``.pyd`` members holding a pickle that would plant a canary file if anything ever
unpickled it, ``.npy`` members, a long non-ASCII key)."""

from __future__ import annotations

import io
import json
import pickle
import tarfile
from pathlib import Path

from tests.conftest import jpeg_bytes, png_bytes
from tests.support.tars import add


class Canary:
    """Unpickling this creates a file: proof that a member was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def canary_pickle(path: Path) -> bytes:
    return pickle.dumps(Canary(str(path)))


def _npy(seed: int) -> bytes:
    import numpy as np

    out = io.BytesIO()
    np.save(out, np.arange(seed, seed + 6, dtype=np.int16).reshape(2, 3))
    return out.getvalue()


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    add(tf, name, data, mtime=1_700_000_000, mode=0o640)


def foreign_shards(root: Path, canary: Path) -> Path:
    """``root/`` with three shards of 15 samples in all (no manifest): ``tw-000000.tar`` by
    webdataset's TarWriter (``__key__`` samples with .jpg/.cls/.json/.pyd/.npy), then two by
    tarfile whose last/first samples share a key (a sample split across the shards), members in
    odd orders (json before the image), a png, a hidden member and a folder entry."""
    import webdataset as wds

    root.mkdir(parents=True, exist_ok=True)
    with wds.TarWriter(str(root / "tw-000000.tar")) as sink:
        for i in range(6):
            sink.write(
                {
                    "__key__": f"tw/{i:03d}",
                    "jpg": jpeg_bytes(500 + i),
                    "cls": str(i % 3).encode(),
                    "json": json.dumps({"i": i}).encode(),
                    "pyd": canary_pickle(canary),
                    "npy": _npy(i),
                }
            )
    with tarfile.open(root / "tw-000001.tar", "w", format=tarfile.GNU_FORMAT) as tf:
        folder = tarfile.TarInfo("folder")
        folder.type = tarfile.DIRTYPE
        tf.addfile(folder)
        for i in range(4):
            _add(tf, f"plain_{i}.json", json.dumps({"p": i}).encode())
            _add(tf, f"plain_{i}.jpg", jpeg_bytes(600 + i))
            if i == 1:
                _add(tf, ".hidden", b"belongs to no sample")
            _add(tf, f"plain_{i}.cls", b"2")
        _add(tf, "split_7.png", png_bytes(7))  # the sample runs on into the next shard
    with tarfile.open(root / "tw-000002.tar", "w", format=tarfile.PAX_FORMAT) as tf:
        _add(tf, "split_7.cls", b"1")
        _add(tf, "split_7.seg.pyd", canary_pickle(canary))
        for i in range(3):
            _add(tf, f"tail_{i}.cls", b"0")
            _add(tf, f"tail_{i}.jpg", jpeg_bytes(700 + i))
        _add(tf, "ünïcode_" + "k" * 110 + ".jpg", jpeg_bytes(800))  # a pax name
        _add(tf, "ünïcode_" + "k" * 110 + ".cls", b"0")
    return root


def read_samples(shards: list[Path]) -> list[tuple[str, list[tuple[str, bytes]]]]:
    """(key, [(member suffix, bytes), ...]) in archive order, as tarfile reads the shards one
    after the other: consecutive regular members sharing a key form a sample (across shards
    too); hidden members, folders and names without an extension belong to none."""
    out: list[tuple[str, list[tuple[str, bytes]]]] = []
    for shard in shards:
        with tarfile.open(shard) as tf:
            for m in tf:
                base = m.name.rsplit("/", 1)[-1]
                if not m.isreg() or base.startswith(".") or "." not in base:
                    continue
                cut = len(m.name) - len(base) + base.index(".")
                key, suffix = m.name[:cut], m.name[cut:]
                data = tf.extractfile(m).read()  # type: ignore[union-attr]
                if out and out[-1][0] == key:
                    out[-1][1].append((suffix, data))
                else:
                    out.append((key, [(suffix, data)]))
    return out


def dataset_samples(folder: Path) -> list[tuple[str, list[tuple[str, bytes]]]]:
    """The samples of a data set, in manifest shard order."""
    manifest = json.loads((folder / "index.json").read_text())
    return read_samples([folder / e["url"] for e in manifest["shardlist"]])
