"""The registry of shard formats: which reader a URL gets, and registrations that would make
that ambiguous refused up front."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pytest

from tests.support.tars import build_tar
from wdstool.base.errors import ConfigError
from wdstool.format.shard_formats import (
    TAR,
    count_samples,
    format_for,
    register_format,
    unregister_format,
)
from wdstool.format.tar_read import TarSampleReader


@dataclass(frozen=True)
class _Toy:
    name: str = "toy"
    suffixes: tuple[str, ...] = (".toy", ".TOY.GZ")

    def read(self, fileobj, url, *, keep=None, lazy=None, lazy_exts=frozenset()):
        return TarSampleReader(fileobj, url, keep=keep)  # the reader does not matter here


@pytest.fixture
def toy():
    fmt = register_format(_Toy())
    yield fmt
    unregister_format(fmt.name)


@pytest.mark.parametrize(
    ("url", "toy_reads_it"),
    [
        ("data/train-000000.toy", True),
        ("s3://bucket/a/b.Toy", True),  # suffixes match whatever the case
        ("https://host/x.toy.gz?X-Amz-Signature=abc", True),  # a query string is not the path
        ("/data/shard.tar", False),
        ("/data/shard-without-suffix", False),  # tar, as every shard was read before
        ("https://host/x.tar?name=y.toy", False),
        ("/data/x.toy/inner.tar", False),
    ],
)
def test_a_url_gets_the_format_its_path_ends_in(toy, url: str, toy_reads_it: bool) -> None:
    assert format_for(url) is (toy if toy_reads_it else TAR)


def test_ambiguous_or_incomplete_formats_are_refused(toy) -> None:
    with pytest.raises(ConfigError, match=r"^shard format 'toy': name 'toy' is 'toy''s already$"):
        register_format(_Toy(suffixes=(".other",)))
    with pytest.raises(ConfigError, match=r"suffix '\.tar' is 'tar''s already"):
        register_format(_Toy(name="tar2", suffixes=(".TAR",)))
    with pytest.raises(ConfigError, match="needs a name, URL suffixes and read"):
        register_format(_Toy(name="empty", suffixes=()))
    assert register_format(toy) is toy  # the same format again is no change
    unregister_format("tar")  # the default cannot go
    assert format_for("x.tar") is TAR


def test_count_samples_reads_headers_through_the_format(toy) -> None:
    data = build_tar([(f"k{i}", {"jpg": b"x" * 700, "cls": b"1"}) for i in range(5)])
    assert count_samples(io.BytesIO(data), "a.tar") == count_samples(io.BytesIO(data), "a.toy") == 5
    unregister_format(toy.name)
    assert format_for("a.toy") is TAR
