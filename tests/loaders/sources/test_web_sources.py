"""Someone else's WebDataset over HTTP: shards written by upstream webdataset's TarWriter (JPEG,
PNG and WebP images, captions on two samples in three), served on 127.0.0.1 by a real HTTP/1.1
server (tests/support/webserver.py) that honours Range and ETag, or ignores Range, wants a token, goes
away, stalls or cuts bodies short. The loader reads the data set once per epoch, counts it
without downloading it where an index says, waits out an outage without losing or repeating a
sample, and says in one line what is wrong when the server stays down."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import webdataset as wds

from loaders import RetryPolicy, make_loader
from tests.conftest import REPO, noise_image
from tests.support.webserver import WebServer
from wdstool.base.errors import ShardError, StorageError

pytestmark = pytest.mark.slow
SHARDS, PER_SHARD = 6, 20
PATTERN = "shard-{000000..000005}.tar"
FAST = RetryPolicy(base_delay=0.02, max_delay=0.2, patience=20.0, read_timeout=2.0)


def _image(i: int, scale: int = 1) -> tuple[str, bytes]:
    img = noise_image((48 + i % 7) * scale, (40 + i % 5) * scale, seed=i)
    fmt = ("JPEG", "PNG", "WEBP")[i % 3]
    buf = io.BytesIO()
    img.save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return {"JPEG": "jpg", "PNG": "png", "WEBP": "webp"}[fmt], buf.getvalue()


def _write(root: Path, scale: int = 1) -> Path:
    n = 0
    for s in range(SHARDS):
        with wds.TarWriter(str(root / f"shard-{s:06d}.tar")) as sink:
            for _ in range(PER_SHARD):
                ext, data = _image(n, scale)
                sample = {"__key__": f"s{n:05d}", ext: data, "cls": str(n % 4).encode()}
                if n % 3:
                    sample["txt"] = f"caption {n}".encode()
                sink.write(sample)
                n += 1
    return root


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> Path:
    """6 shards of 20 samples, as upstream webdataset writes them (PAX headers and all)."""
    return _write(tmp_path_factory.mktemp("foreign"))


@pytest.fixture(scope="module")
def foreign_big(tmp_path_factory) -> Path:
    """The same, with images 6x the size: shards of ~2 MB, read in several pieces."""
    return _write(tmp_path_factory.mktemp("foreign-big"), scale=6)


def _keys_and_pixels(loader, epoch: int = 0) -> list[tuple[str, bytes]]:
    loader.set_epoch(epoch)
    return [
        (k, bytes(p.numpy()))
        for b in loader
        for k, p in zip(b["keys"], b["pixel_values"], strict=True)
    ]


def _loader(source: str, **kw):
    kw.setdefault("num_workers", 2)
    return make_loader(source, 8, image_size=24, seed=1, retry=kw.pop("retry", FAST), **kw)


def test_the_same_epochs_as_from_disk_and_each_byte_read_once(foreign: Path) -> None:
    """A brace pattern over HTTP: the same samples and pixels as the same shards on disk; the
    data set is scanned once (its headers: the images are read through or skipped) and each
    epoch then reads each shard once, workers that split a shard starting at its first
    sample."""
    with WebServer(foreign) as srv:
        web = _loader(f"{srv.url}/{PATTERN}")
        scanned = srv.total_sent(".tar")
        data = sum(p.stat().st_size for p in foreign.glob("*.tar"))
        assert scanned <= data
        assert len(web) == SHARDS * PER_SHARD // 8
        local = _loader(str(foreign / PATTERN))
        for epoch in (0, 1):
            before = srv.total_sent(".tar")
            assert _keys_and_pixels(web, epoch) == _keys_and_pixels(local, epoch)
            assert srv.total_sent(".tar") - before <= 1.02 * data


def test_counts_come_from_an_index_not_from_the_shards(foreign: Path, tmp_path: Path) -> None:
    """`wdstool index PATTERN --out PATH` once; then make_loader(PATH) reads no shard to count
    it, a wids index without filesize works, and so does timm's _info.json beside the shards."""
    with WebServer(foreign) as srv:
        index = tmp_path / "foreign-index.json"
        subprocess.run(
            [sys.executable, "-m", "wdstool", "index", f"{srv.url}/{PATTERN}", "--out", str(index)],
            check=True,
            cwd=REPO,
            capture_output=True,
        )
        entries = json.loads(index.read_text())["shardlist"]
        assert [e["nsamples"] for e in entries] == [PER_SHARD] * SHARDS
        assert all(len(e["offsets"]) == PER_SHARD and e["offsets"][0] == 0 for e in entries)
        before = srv.total_sent(".tar")
        by_index = _loader(str(index))
        assert srv.total_sent(".tar") == before  # nothing read to count
        reference = _keys_and_pixels(by_index)

        wids = {
            "__kind__": "wids-shard-index-v1",
            "wids_version": 1,
            "shardlist": [{"url": e["url"], "nsamples": e["nsamples"]} for e in entries],
        }
        (tmp_path / "wids.json").write_text(json.dumps(wids))
        assert _keys_and_pixels(_loader(str(tmp_path / "wids.json"))) == reference

    served = tmp_path / "served"
    shutil.copytree(foreign, served)
    names = sorted(p.name for p in served.glob("*.tar"))
    info = {
        "splits": {
            "train": {
                "name": "train",
                "num_samples": SHARDS * PER_SHARD,
                "filenames": names,
                "shard_lengths": [PER_SHARD] * SHARDS,
            }
        }
    }
    (served / "_info.json").write_text(json.dumps(info))
    with WebServer(served) as srv:
        for source in (f"{srv.url}/{PATTERN}", f"{srv.url}/_info.json#train", srv.url):
            before = srv.total_sent(".tar")
            loader = _loader(source)
            assert srv.total_sent(".tar") == before, source  # counted from _info.json
            assert _keys_and_pixels(loader) == reference


def test_a_server_that_goes_away_for_seconds_costs_no_sample(foreign_big: Path) -> None:
    """The server stops (its process killed: connections refused, open ones cut) three times
    for 1.5 s mid-epoch, while shards are being read (one batch of read-ahead): the epoch is
    the uninterrupted one, nothing replaced or repeated, the reads resumed where they broke."""
    lazy = {"num_workers": 0, "shuffle_buffer": 8}
    with WebServer(foreign_big, rate=4e6) as srv:  # 4 MB/s: a shard takes ~0.4 s
        reference = _keys_and_pixels(_loader(f"{srv.url}/{PATTERN}", **lazy))
        loader = _loader(f"{srv.url}/{PATTERN}", on_error="skip", **lazy)
        before = len(srv.requests)
        loader.set_epoch(0)
        got, outage = [], threading.Thread()
        for i, b in enumerate(loader):
            got += [
                (k, bytes(p.numpy())) for k, p in zip(b["keys"], b["pixel_values"], strict=True)
            ]
            if i in (1, 5, 9):
                outage.join() if outage.ident else None
                srv.stop()
                outage = threading.Timer(1.5, srv.start)
                outage.start()
        outage.join()
        assert got == reference and loader.num_replaced == 0
        resumed = [r for _m, _p, r in srv.requests[before:] if r not in ("", "bytes=0-")]
        assert len(resumed) >= 3  # each outage broke a read, resumed at its byte


def test_a_server_down_for_good_or_stalled_is_one_line_naming_the_url(foreign: Path) -> None:
    impatient = RetryPolicy(base_delay=0.02, max_delay=0.1, patience=1.0, read_timeout=0.5)
    with WebServer(foreign) as srv:
        loader = _loader(f"{srv.url}/{PATTERN}", retry=impatient, num_workers=0)
        srv.stop()
        started = time.monotonic()
        with pytest.raises(StorageError, match=r"shard-0000\d+\.tar: giving up .*cannot connect"):
            next(iter(loader))
        assert time.monotonic() - started < 15
        srv.start()
        loader = _loader(f"{srv.url}/{PATTERN}", retry=impatient, num_workers=0)
        srv.freeze()  # accepts, answers nothing: a paused server
        try:
            paused = "giving up .*(sent nothing within the read|connecting to the server timed)"
            with pytest.raises(StorageError, match=paused):
                next(iter(loader))
        finally:
            srv.thaw()


def test_not_found_and_access_denied_say_so(foreign: Path) -> None:
    with WebServer(foreign, token="s3cret") as srv:
        with pytest.raises(StorageError, match=r"access denied \(HTTP 401\).*Authorization"):
            _loader(f"{srv.url}/{PATTERN}")
        authorized = {"headers": {"Authorization": "Bearer s3cret"}}
        assert len(_loader(f"{srv.url}/{PATTERN}", storage_options=authorized)) == 15
        with pytest.raises(ShardError, match=r"shard-000006\.tar: not found \(HTTP 404\)"):
            _loader(f"{srv.url}/shard-{{000005..000006}}.tar", storage_options=authorized)


def test_a_server_without_range_support_is_read_as_one_stream(foreign: Path) -> None:
    """Python's own http.server ignores Range: shards are read whole, and a body cut short is
    read again from its start, the delivered part dropped."""
    with WebServer(foreign, ranges=False, faults=["ok"] * 6 + ["drop:30000"]) as srv:
        loader = _loader(f"{srv.url}/{PATTERN}", num_workers=0)
        with WebServer(foreign) as good:
            reference = _keys_and_pixels(_loader(f"{good.url}/{PATTERN}", num_workers=0))
        assert _keys_and_pixels(loader) == reference
        assert srv.injected["drop"] == 1


def test_hf_urls_read_the_hubs_resolve_urls(foreign: Path, monkeypatch) -> None:
    """hf://datasets/ORG/NAME/PATH: the Hub's resolve URL on HF_ENDPOINT, with HF_TOKEN."""
    with WebServer(foreign, token="hf_secret") as srv:
        monkeypatch.setenv("HF_ENDPOINT", srv.url)
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        hub = _loader(f"hf://datasets/someone/some-wds/{PATTERN}", num_workers=0)
        assert any(
            "/datasets/someone/some-wds/resolve/main/shard-" in p for _m, p, _r in srv.requests
        )
        local = _loader(str(foreign / PATTERN), num_workers=0)
        assert _keys_and_pixels(hub) == _keys_and_pixels(local)
        monkeypatch.setenv("HF_TOKEN", "wrong")
        with pytest.raises(StorageError, match=r"access denied .*HF_TOKEN"):
            _loader(f"hf://datasets/someone/some-wds/{PATTERN}", num_workers=0)


def test_a_truncated_shard_replaces_only_what_is_past_the_cut(
    foreign: Path, tmp_path: Path
) -> None:
    """A shard cut inside a member, with or without an index: make_loader does not fail under
    skip, the samples before the cut are trained on, only those after it are replaced, and the
    log says how many and why."""
    cut = tmp_path / "cut"
    shutil.copytree(foreign, cut)
    shard = cut / "shard-000002.tar"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2 + 700])
    with WebServer(cut) as srv:
        for source in (f"{srv.url}/{PATTERN}",):
            with pytest.raises(ShardError, match=r"shard-000002\.tar: truncated"):
                _loader(source, num_workers=0)
            loader = _loader(source, on_error="skip", max_replaced=None)
            keys = [k for k, _p in _keys_and_pixels(loader)]
            readable = sum(1 for k in keys if "s0004" <= k < "s0006")
            assert 5 <= readable < PER_SHARD  # the readable half of the shard was trained on


def test_a_two_rank_job_counts_the_data_set_once(foreign: Path, tmp_path: Path) -> None:
    """examples/train_ddp.py on 2 ranks x 2 workers over HTTP, no index: rank 0 scans the
    shards, every rank gets the counts (one collective), and the job reads the data set at
    most about twice in all: once for the scan, once for the epoch."""
    from tests.support.torchrun import torchrun

    data = sum(p.stat().st_size for p in foreign.glob("*.tar"))
    with WebServer(foreign) as srv:
        proc = torchrun(
            2,
            *("--data", f"{srv.url}/{PATTERN}", "--device", "cpu", "--epochs", "1"),
            *("--batch-size", "8", "--image-size", "24", "--workers", "2"),
            *("--keep-last", "--num-classes", "4", "--keys-log", str(tmp_path / "keys")),
        )
        fetched = srv.total_sent(".tar")
    assert proc.stderr.count("header-only scan") + proc.stdout.count("header-only scan") <= 1
    assert fetched <= 2.05 * data, (fetched, data)
    keys = [
        k
        for r in range(2)
        for line in (tmp_path / "keys" / f"rank{r}.jsonl").read_text().splitlines()
        for k in json.loads(line)["keys"]
    ]
    assert sorted(keys) == [f"s{n:05d}" for n in range(SHARDS * PER_SHARD)]


def test_two_ranks_fetch_each_shard_once_per_host_without_offsets(
    foreign: Path, tmp_path: Path
) -> None:
    """timm's _info.json beside the shards: counts, no sample offsets. 2 ranks x 2 workers
    split shards between them; a split shard is fetched once for the host (one GET, followed
    by every worker of both ranks through the job's copy), so each byte comes once."""
    from tests.support.torchrun import torchrun

    served = tmp_path / "timm"
    served.mkdir()
    names = sorted(p.name for p in foreign.glob("*.tar"))
    for name in names:
        shutil.copyfile(foreign / name, served / name)
    split = {"name": "train", "num_samples": SHARDS * PER_SHARD, "filenames": names}
    split["shard_lengths"] = [PER_SHARD] * SHARDS
    (served / "_info.json").write_text(json.dumps({"splits": {"train": split}}))
    data = sum(p.stat().st_size for p in foreign.glob("*.tar"))
    with WebServer(served) as srv:
        torchrun(
            2,
            *("--data", f"{srv.url}/{PATTERN}", "--device", "cpu", "--epochs", "1"),
            *("--batch-size", "8", "--image-size", "24", "--workers", "2"),
            *("--keep-last", "--num-classes", "4", "--keys-log", str(tmp_path / "keys")),
        )
        gets = Counter(p for _m, p, _r in srv.requests if p.endswith(".tar"))
        fetched = srv.total_sent(".tar")
    assert set(gets.values()) == {1} and len(gets) == SHARDS, gets
    assert fetched <= 1.01 * data, (fetched, data)
    keys = [
        k
        for r in range(2)
        for line in (tmp_path / "keys" / f"rank{r}.jsonl").read_text().splitlines()
        for k in json.loads(line)["keys"]
    ]
    assert sorted(keys) == [f"s{n:05d}" for n in range(SHARDS * PER_SHARD)]


def test_inspect_and_verify_take_the_shards_where_they_are(foreign: Path) -> None:
    """A brace pattern of someone else's shards on a web server: inspect counts them, verify
    reads every one (their member sets differ: a warning), and a server that is down is said
    to be down, not "no manifest"."""
    from tests.conftest import run_cli

    with WebServer(foreign) as srv:
        source = f"{srv.url}/{PATTERN}"
        info = json.loads(run_cli("inspect", source, "--json").stdout)
        assert info["num_shards"] == SHARDS and info["num_samples"] == SHARDS * PER_SHARD
        assert info["sample_keys"][:2] == ["s00000", "s00001"]
        report = run_cli("verify", source, "--json", "-q")
        assert json.loads(report.stdout)["num_samples"] == SHARDS * PER_SHARD
        assert "different member sets" in report.stderr
        srv.stop()
        down = run_cli("verify", srv.url, check=False, env={"WDSTOOL_RETRY_PATIENCE": "0.5"})
        assert down.returncode == 1
        assert "cannot connect" in down.stderr and "no index found" not in down.stderr
