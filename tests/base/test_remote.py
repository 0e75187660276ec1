"""The retrying, resuming remote reader (``RangeReader``) over an in-memory object whose
connections break on a schedule, the S3 and fsspec openers behind it (moto's server on
127.0.0.1, fsspec's memory filesystem), and ``open_shard``'s one-line errors."""

from __future__ import annotations

import io
import logging
import random
import re

import fsspec
import pytest

from wdstool.base.errors import ShardError, StorageError
from wdstool.base.remote import (
    BUFFER,
    HEADER_PAGE,
    SEEK_BY_READING,
    WALK,
    WALK_PAGE,
    Opened,
    RangeReader,
    _total_size,
    fsspec_opener,
    open_remote,
    open_shard,
    s3_opener,
)
from wdstool.base.retry import RetryPolicy

DATA = random.Random(5).randbytes(50_000)
URL = "s3://bucket/shard.tar"


class Body:
    """A response body that delivers ``limit`` bytes, then fails with ``fail`` (or ends)."""

    def __init__(self, data: bytes, limit: int | None, fail: BaseException | None) -> None:
        self.data, self.limit, self.fail = data, limit, fail
        self.pos = 0
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        if self.limit is not None and end > self.limit:
            end = self.limit
            if self.pos >= self.limit:
                if self.fail is not None:
                    raise self.fail
                return b""
        out = self.data[self.pos : end]
        self.pos += len(out)
        return out

    def close(self) -> None:
        self.closed = True
        if self.fail is not None and self.pos >= (self.limit or 0):
            raise OSError("a broken connection fails to close too")


class Store:
    """One object, an ETag, and per connection a fault: None (none), ("cut", N, exc) to break
    after N body bytes (exc None: the body just ends), or an exception raised on connecting."""

    def __init__(self, data: bytes = DATA, faults=(), size_known: bool = True) -> None:
        self.data, self.faults = data, list(faults)
        self.etag = '"v1"'
        self.size_known = size_known
        self.opens: list[tuple[int, str | None]] = []
        self.bodies: list[Body] = []

    def open(self, offset: int, version: str | None, end: int | None = None) -> Opened:
        self.opens.append((offset, version))
        fault = self.faults.pop(0) if self.faults else None
        if isinstance(fault, BaseException):
            raise fault
        limit, fail = (fault[1], fault[2]) if fault else (None, None)
        body = Body(self.data[offset:], limit, fail)
        self.bodies.append(body)
        return Opened(body, len(self.data) if self.size_known else None, self.etag)


def reader(store: Store, attempts: int = 4, **kw) -> tuple[RangeReader, list[float]]:
    slept: list[float] = []
    policy = RetryPolicy(attempts=attempts, base_delay=0.01, max_delay=0.02, patience=0.0)
    return RangeReader(URL, store.open, retry=policy, sleep=slept.append, **kw), slept


def read_all(r: RangeReader, piece: int = 4096) -> bytes:
    out = bytearray()
    buf = bytearray(piece)
    while n := r.readinto(buf):
        out += buf[:n]
    return bytes(out)


# --- resuming -------------------------------------------------------------------------------
def test_resumes_at_the_byte_reached_with_the_first_etag(caplog) -> None:
    store = Store(
        faults=[("cut", 10_000, ConnectionResetError("reset")), ConnectionResetError("refused"),
                ("cut", 7_000, None), ("cut", 5, TimeoutError("slow"))]
    )  # fmt: skip
    stats: dict[str, int] = {}
    r, slept = reader(store, stats=stats)
    with caplog.at_level(logging.INFO, logger="wdstool.base.remote"):
        assert read_all(r) == DATA
    said = [re.sub(r"in 0\.0\d s", "in D s", rec.getMessage()) for rec in caplog.records]
    assert said == [
        f"{URL}: ConnectionResetError: reset at byte 10000; retrying in D s (try 1, 0 s without data)",
        f"{URL}: ConnectionResetError: refused at byte 10000; retrying in D s (try 2, 0 s without data)",
        f"{URL}: TransientError: connection ended at byte 17000 of 50000 at byte 17000; "
        "retrying in D s (try 1, 0 s without data)",
        f"{URL}: TimeoutError: slow at byte 17005; retrying in D s (try 1, 0 s without data)",
    ]
    assert store.opens == [
        (0, None), (10_000, '"v1"'), (10_000, '"v1"'), (17_000, '"v1"'), (17_005, '"v1"'),
    ]  # fmt: skip
    assert stats == {"requests": 4, "retries": 4, "bytes": len(DATA)}
    assert len(slept) == 4 and all(0 <= s <= 0.02 for s in slept)
    assert all(b.closed for b in store.bodies[:-1])  # every broken body was let go
    assert r.tell() == len(DATA) and r.size == len(DATA)


def test_a_body_ending_early_again_and_again_gives_up_saying_so() -> None:
    store = Store(faults=[("cut", 3000, None)] + [("cut", 0, None)] * 5)
    r, _ = reader(store, attempts=3)
    with pytest.raises(StorageError) as info:
        read_all(r, piece=1000)
    assert info.value.message == (
        f"{URL}: giving up at byte offset 3000 after 3 attempts over 0 s: TransientError: connection "
        f"ended at byte 3000 of {len(DATA)}"
    )


def test_small_and_empty_reads() -> None:
    store = Store()
    r, _ = reader(store)
    assert r.readinto(bytearray(0)) == 0 and store.opens == []  # nothing asked: no request
    assert r.read(1) == DATA[:1] and r.read(1) == DATA[1:2]
    assert r.readinto(bytearray(0)) == 0 and r.tell() == 2
    assert r.seek(0) == 0 and r.seek(len(DATA)) == len(DATA)  # no connection open now
    assert r.read(1) == b"" and len(store.opens) == 1  # at the end: nothing to ask for


def test_gives_up_after_attempts_without_progress() -> None:
    store = Store(faults=[("cut", 3000, ConnectionResetError("reset"))] + [TimeoutError("x")] * 9)
    r, slept = reader(store, attempts=4)
    with pytest.raises(StorageError) as info:
        read_all(r, piece=1000)
    assert info.value.message == (
        f"{URL}: giving up at byte offset 3000 after 4 attempts over 0 s: TimeoutError: x"
    )
    assert len(slept) == 3 and len(store.opens) == 4  # the break at 3000 was the first failure


def test_progress_between_failures_never_runs_out() -> None:
    # a break after every 4,000 bytes, 12 in all, with only 2 attempts: each retry progresses
    store = Store(faults=[("cut", 4000, ConnectionResetError("reset"))] * 12)
    r, _ = reader(store, attempts=2)
    assert read_all(r, piece=1000) == DATA
    assert len(store.opens) == 13


def test_a_body_that_ends_early_is_resumed() -> None:
    store = Store(faults=[("cut", 20_000, None)])
    r, slept = reader(store)
    assert read_all(r) == DATA and len(slept) == 1
    assert store.opens[1] == (20_000, '"v1"')


def test_unknown_size_ends_at_the_first_empty_read() -> None:
    store = Store(faults=[("cut", 20_000, None)], size_known=False)
    r, slept = reader(store)
    assert read_all(r) == DATA[:20_000] and slept == [] and r.size is None


def test_other_errors_stop_at_once_naming_the_offset() -> None:
    store = Store(faults=[("cut", 2048, ValueError("garbled\nresponse"))])
    r, slept = reader(store)
    with pytest.raises(StorageError) as info:
        read_all(r, piece=1024)
    assert (
        info.value.message
        == f"{URL}: read failed at byte offset 2048: ValueError: garbled response"
    )
    assert slept == []


@pytest.mark.parametrize("error", [ShardError("s3://b/k: shard not found"), StorageError("x: no")])
def test_our_errors_pass_through(error) -> None:
    r, slept = reader(Store(faults=[error]))
    with pytest.raises(type(error)) as info:
        r.read(10)
    assert info.value is error and slept == []


def test_size_disagreeing_with_the_manifest_is_a_shard_error() -> None:
    r, _ = reader(Store(), size=len(DATA) - 1)
    with pytest.raises(ShardError) as info:
        r.read(10)
    assert info.value.message == (
        f"{URL}: is {len(DATA)} bytes, expected {len(DATA) - 1} (the manifest and the store "
        "disagree: re-pack, or run `wdstool verify`)"
    )
    r, _ = reader(Store(), size=len(DATA))
    assert r.read(10) == DATA[:10]


# --- seeking --------------------------------------------------------------------------------
def test_short_forward_seeks_read_through_long_ones_reopen() -> None:
    store = Store(data=bytes(range(256)) * (3 * SEEK_BY_READING // 256))
    r, _ = reader(store)
    assert r.readable() and r.seekable() and r.tell() == 0
    assert r.read(10) == store.data[:10]
    assert r.seek(1000) == 1000 and r.read(4) == store.data[1000:1004]
    assert len(store.opens) == 1  # read through on the open connection
    at = 1004 + SEEK_BY_READING
    assert r.seek(SEEK_BY_READING, io.SEEK_CUR) == at and r.read(3) == store.data[at : at + 3]
    assert len(store.opens) == 1  # exactly SEEK_BY_READING: still read through
    far = at + 3 + SEEK_BY_READING + 1
    assert r.seek(far) == far and len(store.opens) == 1  # no request before the next read
    assert r.read(5) == store.data[far : far + 5] and store.opens[-1] == (far, '"v1"')
    assert r.seek(7) == 7 and r.read(2) == store.data[7:9]  # backwards: a new request at 7
    assert store.opens[-1] == (7, '"v1"') and len(store.opens) == 3
    assert r.seek(9) == 9 and len(store.opens) == 3  # where it is: nothing to do
    assert r.seek(10) == 10 and r.read(1) == store.data[10:11]  # one byte ahead: read through
    odd = 11 + BUFFER + BUFFER // 2  # not a whole number of read-through buffers
    assert r.seek(odd) == odd and r.read(3) == store.data[odd : odd + 3]
    assert len(store.opens) == 3
    assert r.seek(0) == 0 and r.read(2) == store.data[:2] and store.opens[-1] == (0, '"v1"')
    assert len(store.opens) == 4
    assert r.seek(-4, io.SEEK_END) == len(store.data) - 4
    assert r.read() == store.data[-4:] and r.read(1) == b""
    with pytest.raises(ValueError, match="negative seek position -1"):
        r.seek(-1)


def test_pages_ask_for_pieces_seek_inside_by_reading_and_past_by_asking_there() -> None:
    """``page``: each request asks for at most a page (the opener gets its end); a forward seek
    inside the page asked for reads through, one past it asks for the next page there; a store
    whose bodies run on (``bounded=False``) is asked for no more pages."""
    store = Store()
    ends: list[int | None] = []

    def opener(offset: int, version: str | None, end: int | None = None) -> Opened:
        ends.append(end)
        return store.open(offset, version, end)

    r = RangeReader(URL, opener)
    r.page = 1000
    assert r.read(10) == DATA[:10] and ends == [1000]
    assert r.seek(900) == 900 and r.read(200) == DATA[900:1000]  # stops at the page's end
    assert len(store.opens) == 1
    assert r.read(5) == DATA[1000:1005] and store.opens[-1][0] == 1000 and ends[-1] == 2000
    assert r.seek(2001) == 2001 and r.read(3) == DATA[2001:2004]  # past the page: asked there
    assert store.opens[-1][0] == 2001 and ends[-1] == 3001 and len(store.opens) == 3
    r.page = None
    assert r.seek(5000) == 5000 and r.read() == DATA[5000:] and ends[-1] is None

    def unbounded(offset: int, version: str | None, end: int | None = None) -> Opened:
        ends.append(end)
        opened = store.open(offset, version, end)
        return Opened(opened.body, opened.size, opened.version, bounded=False)

    ends.clear()
    r = RangeReader(URL, unbounded)
    r.page = 1000
    assert r.read() == DATA and ends == [1000]  # one request: the body ran on


def test_a_walk_asks_for_megabytes_and_only_headers_after_a_jump_over_a_large_member() -> None:
    """``page=WALK``: a header walk over small members is read through in pieces of WALK_PAGE
    (a request costs more than the bytes between two headers); after a jump over a member
    larger than a piece, the next request asks for HEADER_PAGE only."""
    data = bytes(3 * WALK_PAGE)
    store = Store(data=data)
    ends: list[int | None] = []

    def opener(offset: int, version: str | None, end: int | None = None) -> Opened:
        ends.append(end)
        return store.open(offset, version, end)

    r = RangeReader(URL, opener)
    r.page = WALK
    for at in range(0, WALK_PAGE, 100_000):  # headers 100 KB apart: one piece holds them all
        assert r.seek(at) == at and r.read(512) == data[at : at + 512]
    assert ends == [WALK_PAGE]
    far = 2 * WALK_PAGE + WALK_PAGE // 4  # a member of more than a piece is jumped over
    assert r.seek(far) == far and r.read(512) == data[far : far + 512]
    assert store.opens[-1][0] == far and ends[-1] == far + HEADER_PAGE
    near = far + HEADER_PAGE + 3000  # small members again: megabytes again
    assert r.seek(near) == near and r.read(1) == data[near : near + 1]
    assert ends[-1] == near + WALK_PAGE and len(ends) == 3


def test_seek_from_the_end_learns_the_size_first() -> None:
    store = Store()
    r, _ = reader(store)
    assert r.seek(-100, io.SEEK_END) == len(DATA) - 100 and store.opens == [(0, None)]
    assert r.read() == DATA[-100:]
    unknown, _ = reader(Store(size_known=False))
    with pytest.raises(OSError, match=f"{URL}: size unknown, cannot seek from the end"):
        unknown.seek(-1, io.SEEK_END)


def test_read_through_stops_at_the_end_of_the_object() -> None:
    store = Store(size_known=False)
    r, _ = reader(store)
    r.read(10)
    assert r.seek(len(DATA) + 500) == len(DATA) and r.read(1) == b""


def test_close_lets_the_connection_go() -> None:
    store = Store()
    r, _ = reader(store)
    r.read(5)
    r.close()
    assert store.bodies[0].closed and r.closed


def test_open_remote_buffers_one_megabyte() -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe("/remote/a.tar", DATA)
    f = open_remote("memory://remote/a.tar", size=len(DATA))
    assert isinstance(f, io.BufferedReader) and f.read() == DATA
    assert BUFFER == 1 << 20


# --- openers --------------------------------------------------------------------------------
def test_total_size_from_content_range_or_length() -> None:
    # the total from ContentRange, not offset + ContentLength (here they disagree on purpose)
    assert _total_size({"ContentRange": "bytes 100-199/300", "ContentLength": 100}, 100) == 300
    assert _total_size({"ContentRange": "bytes 0-9/*", "ContentLength": 10}, 0) == 10
    assert _total_size({"ContentRange": "", "ContentLength": 10}, 5) == 15
    assert _total_size({"ContentLength": "7"}, 0) == 7
    assert _total_size({}, 3) is None


def test_fsspec_options_and_our_reader_settings_reach_the_store(tmp_path) -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe("/remote/c.tar", DATA)
    cache = tmp_path / "cache"
    stats: dict[str, int] = {}
    url = "simplecache::memory://remote/c.tar"
    options = {"simplecache": {"cache_storage": str(cache)}}
    with open_shard(url, options, size=len(DATA), stats=stats) as f:
        assert f.read() == DATA
    assert stats["bytes"] == len(DATA) and stats["requests"] == 1
    assert any(p.is_file() for p in cache.iterdir())  # the options reached fsspec
    with pytest.raises(
        ShardError, match=r"^memory://remote/c\.tar: is 50000 bytes, expected 49999"
    ):
        open_shard("memory://remote/c.tar", size=len(DATA) - 1).read(1)


def test_fsspec_opener_reads_from_an_offset() -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe("/remote/b.tar", DATA)
    opened = fsspec_opener("memory://remote/b.tar", None)(1234, None)
    assert opened.size == len(DATA) and opened.version is None
    assert opened.body.read(10) == DATA[1234:1244]
    with pytest.raises(ShardError, match=r"^memory://remote/none\.tar: shard not found$"):
        fsspec_opener("memory://remote/none.tar", None)(0, None)
    with open_shard("memory://remote/b.tar") as f:
        f.seek(40_000)
        assert f.read() == DATA[40_000:]


@pytest.fixture
def s3_object(s3_server, s3_bucket: str) -> str:
    s3_server.client().put_object(Bucket=s3_bucket, Key="ds/a.tar", Body=DATA)
    return f"s3://{s3_bucket}/ds/a.tar"


@pytest.mark.slow
def test_s3_opener_ranges_and_if_match(s3_server, s3_object: str) -> None:
    open_at = s3_opener(s3_object, s3_server.storage_options)
    whole = open_at(0, None)
    assert whole.size == len(DATA) and whole.version and whole.body.read() == DATA
    part = open_at(49_000, whole.version)
    assert part.size == len(DATA) and part.body.read() == DATA[49_000:]
    with pytest.raises(StorageError) as info:
        open_at(10, '"another-etag"')
    assert info.value.message == (
        f"{s3_object}: the object changed while it was being read (ETag no longer matches)"
    )


@pytest.mark.slow
def test_s3_opener_errors(s3_server, s3_object: str) -> None:
    missing = s3_object.replace("a.tar", "b.tar")
    with pytest.raises(ShardError, match=f"^{missing}: shard not found$"):
        s3_opener(missing, s3_server.storage_options)(0, None)
    with pytest.raises(ShardError, match=f"^{s3_object}: shorter than 60000 bytes$"):
        s3_opener(s3_object, s3_server.storage_options)(60_000, None)
    with open_shard(s3_object, s3_server.storage_options, size=len(DATA)) as f:
        assert f.read() == DATA
    bucket_only = s3_object.split("/ds/")[0] + "/"  # no key: botocore refuses the request
    with pytest.raises(StorageError) as info:
        s3_opener(bucket_only, s3_server.storage_options)(0, None)
    assert info.value.message.startswith(f"{bucket_only}: ")


@pytest.mark.slow
def test_the_retry_policy_reaches_the_reader(s3_server, s3_object: str) -> None:
    from tests.support.faultproxy import FaultProxy

    with FaultProxy(s3_server.port, ["503", "500", "drop:20000"]) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.endpoint_url}
        policy = RetryPolicy(attempts=3, base_delay=0.01, patience=0.0)
        assert open_shard(s3_object, options, retry=policy).read() == DATA  # errors at open
        assert proxy.injected["503"] == proxy.injected["500"] == proxy.injected["drop"] == 1
        proxy.set_schedule(["drop:20000"])
        with pytest.raises(StorageError) as info:
            open_shard(s3_object, options, retry=RetryPolicy(attempts=1, patience=0.0)).read()
    assert info.value.message.startswith(f"{s3_object}: giving up at byte offset ")
    assert "after 1 attempts" in info.value.message


# --- open_shard -----------------------------------------------------------------------------
def test_open_shard_local_files(tmp_path) -> None:
    path = tmp_path / "a.tar"
    path.write_bytes(DATA)
    with open_shard(str(path)) as f:
        assert f.read() == DATA and isinstance(f, io.BufferedReader)
    with open_shard(f"file://{path}", local_buffer=0) as f:
        assert isinstance(f, io.FileIO) and f.read(3) == DATA[:3]
    with pytest.raises(ShardError, match=f"^{tmp_path}/none.tar: shard not found$"):
        open_shard(str(tmp_path / "none.tar"))
    with pytest.raises(StorageError, match=f"^{tmp_path}: cannot open shard: Is a directory$"):
        open_shard(str(tmp_path))


def test_open_shard_bad_protocol_is_one_line() -> None:
    with pytest.raises(StorageError, match=r"^nosuchproto://x/a\.tar: cannot open shard: "):
        open_shard("nosuchproto://x/a.tar")


def test_open_errors_never_show_a_credential() -> None:
    secret = "sEcReT" + "1234" * 3  # shown nowhere, even where a name happens to contain it
    with pytest.raises(StorageError) as info:
        open_shard(f"nosuchproto://b/{secret}.tar", {"secret": secret})
    assert secret not in info.value.message and "nosuchproto://b/***.tar: " in info.value.message


@pytest.mark.slow
def test_s3_errors_never_show_a_credential(s3_server) -> None:
    token = "ToKeN" + "5678" * 3
    options = {**s3_server.storage_options, "token": token}
    url = f"s3://no-such-bucket-here/{token}.tar"
    with pytest.raises(StorageError) as info:
        s3_opener(url, options)(0, None)
    message = info.value.message
    assert token not in message and message.startswith("s3://no-such-bucket-here/***.tar: ")
