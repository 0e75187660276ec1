"""The text room's data: the local tokenizer as a file and as a transformers folder, and
caption shards (KEY.jpg + KEY.txt, img2dataset's layout, no manifest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import jpeg_bytes
from tests.support.tars import build_tar
from tests.support.tokenizers_local import TEXT, save_folder, save_json, train_tokenizer

CAPTIONS = [f"{TEXT[i % len(TEXT)]} Number {i}." for i in range(24)]


@pytest.fixture(scope="session")
def bpe():
    return train_tokenizer()


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory, bpe) -> Path:
    return save_json(tmp_path_factory.mktemp("tok") / "tokenizer.json", bpe)


@pytest.fixture(scope="session")
def tokenizer_folder(tmp_path_factory, bpe) -> Path:
    return save_folder(tmp_path_factory.mktemp("tok") / "saved", bpe)


@pytest.fixture(scope="session")
def caption_shards(tmp_path_factory) -> Path:
    """24 samples with captions in 3 shards of 8."""
    folder = tmp_path_factory.mktemp("captions")
    for shard in range(3):
        keys = range(shard * 8, shard * 8 + 8)
        samples = [
            (f"{k:06d}", {"jpg": jpeg_bytes(k, (40, 30)), "txt": CAPTIONS[k].encode()})
            for k in keys
        ]
        (folder / f"part-{shard:05d}.tar").write_bytes(build_tar(samples))
    return folder
