"""Reading DALI webdataset index files back, independently of wdstool's writer, and checking
them against a tar read with Python's tarfile.

``parse_dali_index`` follows DALI's own parser (``ParseIndexFile`` in
``dali/operators/reader/loader/webdataset_loader.cc``): a first line ``<version> <count>`` with
the version in {v1.1, v1.2} and a positive count, then exactly ``count`` lines of whitespace-
separated ``<ext> <offset> <size> <filename>`` groups (v1.2; v1.1 has no filename), offsets a
multiple of 512. DALI seeks to ``offset`` and reads ``size`` bytes as the component's data.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    ext: str
    offset: int
    size: int
    filename: str


def parse_dali_index(text: str) -> list[list[Component]]:
    lines = text.split("\n")
    head = lines[0].split()
    assert len(head) >= 2, f"no version and count: {lines[0]!r}"
    version, count = head[0], int(head[1])
    assert version in ("v1.1", "v1.2"), version
    assert count > 0
    assert text.endswith("\n") and len(lines) == count + 2 and lines[-1] == "", "line count"
    width = 4 if version == "v1.2" else 3
    samples = []
    for line in lines[1 : count + 1]:
        tokens = line.split()
        assert tokens and len(tokens) % width == 0, f"malformed line {line!r}"
        sample = []
        for i in range(0, len(tokens), width):
            ext, offset, size = tokens[i], int(tokens[i + 1]), int(tokens[i + 2])
            name = tokens[i + 3] if width == 4 else ""
            assert offset % 512 == 0, f"offset {offset} not a multiple of 512"
            sample.append(Component(ext, offset, size, name))
        samples.append(sample)
    return samples


def expected_from_tarfile(tar: bytes) -> list[list[Component]]:
    """What the index of ``tar`` must say, from Python's tarfile: regular members with an
    extension, not hidden, grouped by consecutive key; offsets where the data starts."""
    samples: list[list[Component]] = []
    last = None
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        for m in tf.getmembers():
            if not m.isreg():
                continue
            base = m.name.rsplit("/", 1)[-1]
            if base.startswith(".") or "." not in base or base.endswith("."):
                continue
            dot = m.name.find(".", m.name.rfind("/") + 1)
            key, ext = m.name[:dot], m.name[dot + 1 :]
            if key != last:
                samples.append([])
                last = key
            samples[-1].append(Component(ext, m.offset_data, m.size, m.name))
    return samples


def check_index_against_tar(text: str, tar: bytes) -> list[list[Component]]:
    """Parse ``text``, check it equals what tarfile sees in ``tar``, and that the bytes at every
    offset, ``size`` long, are exactly the member's data. Returns the parsed samples."""
    samples = parse_dali_index(text)
    assert samples == expected_from_tarfile(tar)
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        data = {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isreg()}
    for sample in samples:
        for c in sample:
            assert tar[c.offset : c.offset + c.size] == data[c.filename], c
    return samples
