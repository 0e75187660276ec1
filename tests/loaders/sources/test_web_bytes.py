"""What a loader fetches from a web server, counted by the server itself (tests/support/webserver.py on
127.0.0.1, shards written by upstream webdataset): a worker whose share starts inside a shard
that no index gives offsets for reads on from its first sample (the bytes before it are the
previous worker's, fetched once), a server that ignores Range sends each shard once per reader
of it and sees no connection reset, and the header scan fetches headers, not the data, and is
counted in ``stats()``."""

from __future__ import annotations

import io
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import webdataset as wds

from loaders import RetryPolicy, make_loader
from shard_writer.pack import PackOptions, pack
from tests.conftest import noise_image
from tests.support.webserver import WebServer
from wdstool.base.remote import WALK_PAGE

pytestmark = pytest.mark.slow
FAST = RetryPolicy(base_delay=0.02, max_delay=0.2, patience=20.0, read_timeout=5.0)
SHARDS, PER_SHARD = 8, 40  # ~110 KB samples: 4.4 MB shards, 35 MB in all


def _jpegs(n: int, size: tuple[int, int]) -> list[bytes]:
    out = []
    for i in range(n):
        buf = io.BytesIO()
        noise_image(*size, seed=i).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def _write(root: Path, shards: int, per: int, *, size=(512, 384), big: int = 0) -> int:
    """``shards`` shards of ``per`` samples (jpg, cls, a caption on two in three; with ``big``,
    the third sample of each shard has a ``.bin`` of that many bytes, which the loader skips)
    and timm's ``_info.json`` beside them; the shards' bytes."""
    root.mkdir(parents=True, exist_ok=True)
    jpegs = _jpegs(per, size)
    for s in range(shards):
        with wds.TarWriter(str(root / f"part-{s:06d}.tar")) as sink:
            for i in range(per):
                n = s * per + i
                sample = {"__key__": f"{n:07d}", "jpg": jpegs[i], "cls": str(n % 5).encode()}
                if n % 3:
                    sample["txt"] = f"a photo number {n}".encode()
                if big and i == 2:
                    sample["bin"] = bytes(big)
                sink.write(sample)
    names = sorted(p.name for p in root.glob("part-*.tar"))
    split = {"name": "train", "num_samples": shards * per, "filenames": names}
    split["shard_lengths"] = [per] * shards
    (root / "_info.json").write_text(json.dumps({"splits": {"train": split}}))
    return sum(p.stat().st_size for p in root.glob("part-*.tar"))


def _pattern(shards: int) -> str:
    return f"part-{{000000..{shards - 1:06d}}}.tar"


def _epoch(loader, epoch: int) -> list[str]:
    loader.set_epoch(epoch)
    return [k for b in loader for k in b["keys"]]


def _loader(source: str, **kw):
    return make_loader(source, 8, image_size=24, seed=1, retry=FAST, **kw)


@pytest.fixture(scope="module")
def timm_shards(tmp_path_factory) -> tuple[Path, int]:
    root = tmp_path_factory.mktemp("timm-web")
    return root, _write(root, SHARDS, PER_SHARD)


def test_a_worker_starting_inside_a_shard_fetches_no_byte_twice_and_few_requests(
    timm_shards: tuple[Path, int],
) -> None:
    """timm's _info.json counts the shards but says nothing of where samples lie: each epoch's
    rotation and the cut between the 2 workers start a worker's share inside a shard. Such a
    shard is read through the host's cache (one GET from byte 0, both workers walk its headers
    in the local copy), so each byte comes once and each shard in one request an epoch. One
    epoch fetched 1.25x the data before issue 47 and cut 2 connections; walking 8 KB at every
    header then took ~1 request a sample."""
    root, data = timm_shards
    with WebServer(root) as srv:
        loader = _loader(f"{srv.url}/{_pattern(SHARDS)}", num_workers=2)
        for epoch in (0, 1):
            before, resets, asked = srv.total_sent(".tar"), srv.resets, len(srv.requests)
            keys = _epoch(loader, epoch)
            assert sorted(keys) == [f"{n:07d}" for n in range(SHARDS * PER_SHARD)]
            fetched = srv.total_sent(".tar") - before
            assert fetched <= 1.05 * data, (epoch, fetched / data)
            gets = [p for _m, p, _r in srv.requests[asked:] if p.endswith(".tar")]
            assert len(gets) <= SHARDS, gets  # a split shard is fetched once, in one GET
            assert srv.resets == resets, epoch  # every response read to its end


def test_a_packed_shard_split_between_workers_is_one_ranged_get_per_slice(tmp_path: Path) -> None:
    """pack records every sample's offset (index.offsets.npy): a worker whose share starts
    inside the one shard asks for its part of the offsets once, then for exactly its slice's
    bytes in one GET; nothing is asked for twice."""
    src = tmp_path / "src"
    for i, jpeg in enumerate(_jpegs(40, (512, 384))):
        (src / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        (src / f"c{i % 2}" / f"{i:03d}.jpg").write_bytes(jpeg)
    out = tmp_path / "ds"
    assert pack(str(src), str(out), PackOptions(workers=1)).shards == 1
    shard = next(out.glob("*.tar"))
    size = shard.stat().st_size
    with WebServer(out) as srv:
        loader = _loader(srv.url, num_workers=2)
        for epoch in (0, 1):
            assert len(_epoch(loader, epoch)) == 40
        gets = [(p, r) for _m, p, r in srv.requests if p.endswith((".tar", ".npy"))]
    tar = [r for p, r in gets if p.endswith(".tar")]
    assert len(tar) <= 2 * 2 * 2, gets  # 2 epochs x 2 workers x at most 2 slices of the shard
    assert srv.total_sent(".tar") <= 2 * 1.05 * size
    # each worker of the first epoch at most (the host keeps them): this shard's 40 x 4 bytes
    offsets = [r for p, r in gets if p.endswith(".npy")]
    assert 1 <= len(offsets) <= 2 and set(offsets) == {"bytes=128-287"}, offsets


def test_a_server_without_range_sends_each_shard_once_to_each_reader(tmp_path: Path) -> None:
    """Python's http.server ignores Range: a shard is one stream from byte 0. A member passed
    over (5 MB, more than a reader seeks past by reading) does not open the shard again (which
    fetched it again from byte 0), and a reader whose share ends inside a shard reads out the
    rest of the body rather than cut the connection (the server logged a reset per epoch). So
    one GET per shard and reader: a shard split between two readers is fetched by both."""
    shards = 4
    _write(tmp_path, shards, 8, size=(96, 64), big=5 << 20)
    with WebServer(tmp_path, ranges=False) as srv:
        for workers in (0, 2):
            loader = _loader(f"{srv.url}/{_pattern(shards)}", num_workers=workers)
            for epoch in (0, 1):
                before, resets = len(srv.requests), srv.resets
                assert len(_epoch(loader, epoch)) == shards * 8
                gets = Counter(p for m, p, _r in srv.requests[before:] if p.endswith(".tar"))
                # a reader per worker (one stream without workers), each ending inside a shard
                # at most once: at most one more GET per reader than there are shards
                assert sum(gets.values()) <= shards + max(1, workers), (workers, epoch, gets)
                assert srv.resets == resets, (workers, epoch)


def test_the_header_scan_is_a_few_large_requests_a_shard_and_stats_count_it(
    timm_shards: tuple[Path, int], tmp_path: Path
) -> None:
    """No index: make_loader scans the shards' headers. It walks each shard in pieces of
    WALK_PAGE and finds the headers in what came (a request costs more than the ~110 KB between
    two headers: S3 answers in 20-50 ms, in which ~3 MB could have come), so a scan is a couple
    of requests a shard (8 KB asked at every header was 320 requests here, one a sample), each
    byte at most once; what it fetched (the index files looked for, 404s included) is in
    ``stats().setup`` and in the all-epochs counters."""
    root, data = timm_shards
    served = tmp_path / "no-index"
    served.mkdir()
    for p in root.glob("part-*.tar"):
        shutil.copyfile(p, served / p.name)
    with WebServer(served) as srv:
        before = len(srv.requests)
        loader = _loader(f"{srv.url}/{_pattern(SHARDS)}", num_workers=2)
        asked = srv.requests[before:]
        scanned = srv.total_sent(".tar")
        shard = max(p.stat().st_size for p in served.glob("*.tar"))
        tar_gets = [r for _m, p, r in asked if p.endswith(".tar")]
        assert len(tar_gets) <= SHARDS * -(-shard // WALK_PAGE), tar_gets
        assert scanned <= data, scanned / data
        setup = loader.stats(memory=False).setup
        assert [p for _m, p, _r in asked[:3]] == ["/index.json", "/_info.json", "/info.json"]
        assert setup.requests == len(asked)
        assert setup.network_bytes == scanned
        assert 0 < setup.network_bytes == loader.stats(memory=False).all_epochs.network_bytes
        sent = srv.total_sent(".tar")
        _epoch(loader, 0)
        assert srv.total_sent(".tar") - sent <= 1.01 * data  # offsets known: each byte once
