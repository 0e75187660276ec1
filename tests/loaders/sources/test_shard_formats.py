"""The shard-reader seam: a container format other than tar, registered in the test alone (a
JSON-lines "shard" of base64 members), streams through ``make_loader`` (main process and
forked workers) into the same batches as the same samples in tar shards, is counted without a
manifest, and is checked by ``verify``: nothing in the stream knows which format it reads."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pytest
import torch
import webdataset as wds

from loaders import make_loader
from shard_writer import verify_dataset
from tests.conftest import jpeg_bytes
from wdstool.base.errors import ShardError
from wdstool.format.shard_formats import Sample, register_format, unregister_format

SHARDS, PER_SHARD = 2, 6


class _LinesReader:
    """One sample a line: {"key": ..., "members": {ext: base64}}."""

    def __init__(self, f: BinaryIO, url: str, keep: Callable[[str], bool] | None) -> None:
        self._lines = f.read().splitlines(keepends=True)  # a toy: the whole shard at once
        self._url, self._keep = url, keep
        self._next = 0
        self.offset = 0

    def __iter__(self) -> Iterator[Sample]:
        while self._next < len(self._lines):
            line, at = self._lines[self._next], self.offset
            self._next += 1
            self.offset += len(line)
            row = json.loads(line)
            parts = {
                ext: base64.b64decode(data)
                for ext, data in row["members"].items()
                if self._keep is None or self._keep(ext)
            }
            yield Sample(row["key"], parts, at)

    def skip(self, n: int) -> None:
        if self._next + n > len(self._lines):
            raise ShardError(f"{self._url}: has only {len(self._lines)} samples")
        self.offset += sum(len(line) for line in self._lines[self._next : self._next + n])
        self._next += n


@dataclass(frozen=True)
class JsonLinesFormat:
    name: str = "b64-jsonl"
    suffixes: tuple[str, ...] = (".b64.jsonl",)

    def read(
        self, fileobj: BinaryIO, url: str, *, keep=None, lazy=None, lazy_exts=frozenset()
    ) -> _LinesReader:
        return _LinesReader(fileobj, url, keep)  # lazy views need contiguous bytes: not here


@pytest.fixture
def jsonl_format() -> Iterator[JsonLinesFormat]:
    fmt = register_format(JsonLinesFormat())
    yield fmt
    unregister_format(fmt.name)


def _samples() -> list[tuple[str, bytes, int]]:
    return [(f"s{i:03d}", jpeg_bytes(i, size=(64, 48)), i % 3) for i in range(SHARDS * PER_SHARD)]


def _write_both(root: Path) -> tuple[str, str]:
    """The same samples as JSON-lines shards and as tar shards; (pattern, pattern)."""
    samples = _samples()
    for s in range(SHARDS):
        part = samples[s * PER_SHARD : (s + 1) * PER_SHARD]
        lines = [
            json.dumps(
                {
                    "key": key,
                    "members": {
                        "jpg": base64.b64encode(jpg).decode(),
                        "cls": base64.b64encode(str(label).encode()).decode(),
                    },
                }
            )
            for key, jpg, label in part
        ]
        (root / f"part-{s}.b64.jsonl").write_text("\n".join(lines) + "\n")
        with wds.TarWriter(str(root / f"part-{s}.tar")) as tar:
            for key, jpg, label in part:
                tar.write({"__key__": key, "jpg": jpg, "cls": str(label).encode()})
    last = SHARDS - 1
    return str(root / f"part-{{0..{last}}}.b64.jsonl"), str(root / f"part-{{0..{last}}}.tar")


def _batches(source: str, **kw: Any) -> list[dict[str, Any]]:
    loader = make_loader(source, 4, image_size=32, shuffle=False, seed=3, **kw)
    return [
        {"keys": list(b["keys"]), "labels": b["labels"].clone(), "px": b["pixel_values"].clone()}
        for b in loader
    ]


def test_a_registered_format_streams_as_tar_does(tmp_path: Path, jsonl_format) -> None:
    jsonl, tar = _write_both(tmp_path)
    for workers in (0, 2):  # in the main process, and in forked DataLoader workers
        want = _batches(tar, num_workers=workers)
        assert sorted(k for b in want for k in b["keys"]) == [k for k, _, _ in _samples()]
        got = _batches(jsonl, num_workers=workers)
        assert [b["keys"] for b in got] == [b["keys"] for b in want]
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g["labels"], w["labels"]) and torch.equal(g["px"], w["px"])


def test_a_registered_format_passes_verify(tmp_path: Path, jsonl_format) -> None:
    """A manifest naming JSON-lines shards: verify walks their samples through the format
    (sizes, sha256, counts, labels checked; tar's member safety does not apply)."""
    _write_both(tmp_path)
    shards = []
    for s in range(SHARDS):
        data = (tmp_path / f"part-{s}.b64.jsonl").read_bytes()
        shards.append(
            {
                "url": f"part-{s}.b64.jsonl",
                "nsamples": PER_SHARD,
                "filesize": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    manifest = {"__kind__": "wids-shard-index-v1", "shardlist": shards, "classes": ["a", "b", "c"]}
    (tmp_path / "index.json").write_text(json.dumps(manifest))
    report = verify_dataset(str(tmp_path))
    assert report["ok"] and report["num_samples"] == SHARDS * PER_SHARD
    shards[1]["nsamples"] = PER_SHARD + 1  # a count the shard does not hold is still found
    (tmp_path / "index.json").write_text(json.dumps(manifest))
    with pytest.raises(ShardError, match=r"part-1\.b64\.jsonl: 6 samples, manifest says 7"):
        verify_dataset(str(tmp_path))
