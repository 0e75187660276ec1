"""Image bytes read out of memory-mapped local shards when decoded, guarded against SIGBUS."""

from __future__ import annotations

import mmap
import os
import shutil
from pathlib import Path

import pytest

import wdstool.format.mapped as mapped
from loaders import make_loader
from loaders.plan import Slice
from loaders.read import read_slices
from loaders.source import resolve_source
from wdstool.base.errors import ShardError, WdsToolError
from wdstool.format.images import IMAGE_EXTENSIONS
from wdstool.format.mapped import MappedMember

needs_ext = pytest.mark.skipif(not mapped.MMAP, reason="wdstool/format/_mapread not built")


@needs_ext
def test_local_images_come_as_mapped_members_with_the_same_bytes(uneven_dataset: Path) -> None:
    index = resolve_source(str(uneven_dataset))
    lazy = list(read_slices([Slice(0, 0, 10)], index, keep=IMAGE_EXTENSIONS | {"cls"},
                            lazy=IMAGE_EXTENSIONS))  # fmt: skip
    eager = list(read_slices([Slice(0, 0, 10)], index, keep=IMAGE_EXTENSIONS | {"cls"}))
    assert all(isinstance(loc.sample.parts["jpg"], MappedMember) for loc in lazy)
    assert all(isinstance(loc.sample.parts["cls"], bytes) for loc in lazy)  # small: read
    for a, b in zip(lazy, eager, strict=True):
        assert bytes(a.sample.parts["jpg"].bytes_()) == b.sample.parts["jpg"]


@needs_ext
def test_a_file_truncated_under_the_mapping_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(1 << 20))
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    member = MappedMember(m, 600_000, 100_000, str(path))
    assert len(member.bytes_()) == 100_000
    os.truncate(path, 4096)  # what a tool rewriting the shard in place would do
    with pytest.raises(ShardError) as err:
        member.bytes_()
    assert str(path) in err.value.message and "changed while it was being read" in err.value.message
    assert "\n" not in err.value.message


@needs_ext
@pytest.mark.parametrize("workers", [0, 1])
def test_a_shard_truncated_mid_epoch_is_a_clear_error_not_a_dead_worker(
    uneven_dataset: Path, tmp_path: Path, workers: int
) -> None:
    ds = tmp_path / "ds"
    shutil.copytree(uneven_dataset, ds)
    loader = make_loader(str(ds), 2, image_size=16, num_workers=workers, shuffle=False,
                         shuffle_buffer=0, prefetch_factor=1)  # fmt: skip
    it = iter(loader)
    next(it)
    for shard in ds.glob("*.tar"):  # everything the stream still holds views into
        os.truncate(shard, 1024)
    with pytest.raises(WdsToolError) as err:
        for _ in it:
            pass
    assert ".tar" in err.value.message and "\n" not in err.value.message


def test_mmap_off_gives_the_same_batches(uneven_dataset: Path, monkeypatch) -> None:
    def epoch():
        loader = make_loader(str(uneven_dataset), 4, image_size=16, num_workers=0, seed=2)
        return [(b["keys"], b["pixel_values"].clone()) for b in loader]

    on = epoch()
    monkeypatch.setattr(mapped, "MMAP", False)
    off = epoch()
    assert [k for k, _ in on] == [k for k, _ in off]
    assert all((a == b).all() for (_, a), (_, b) in zip(on, off, strict=True))
