"""A read resumed after a dropped connection asks for the same object (``If-Match`` with the first
response's ETag): an object replaced in between is a one-line error naming it, never a silent
mix of two versions (README, "S3 and other object stores")."""

from __future__ import annotations

import random

import pytest

from tests.support.faultproxy import FaultProxy
from wdstool.base.errors import StorageError
from wdstool.base.remote import open_shard
from wdstool.base.retry import RetryPolicy

pytestmark = pytest.mark.slow
FAST_RETRY = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.02, patience=0.0)
SIZE = 300_000
DROP_AT = 60_000  # response bytes (headers included) before the connection drops


def _blob(seed: int) -> bytes:
    return random.Random(seed).randbytes(SIZE)


def _read_through_a_drop(s3_server, bucket: str, replace_with: bytes | None) -> tuple[bytes, int]:
    """Read one object whose GET drops after DROP_AT bytes; ``replace_with``: the object is
    overwritten (same size) while the connection is dropped. Returns (bytes read, drops)."""
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="ds/train-000000.tar", Body=_blob(1))

    def replace(fault: str) -> None:
        if replace_with is not None:
            client.put_object(Bucket=bucket, Key="ds/train-000000.tar", Body=replace_with)

    with FaultProxy(s3_server.port, [f"drop:{DROP_AT}"], on_fault=replace) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.endpoint_url}
        url = f"s3://{bucket}/ds/train-000000.tar"
        with open_shard(url, options, retry=FAST_RETRY, size=SIZE) as f:
            data = f.read()
        return data, proxy.injected["drop"]


def test_resume_after_a_drop_reads_the_same_object(s3_server, s3_bucket: str) -> None:
    data, drops = _read_through_a_drop(s3_server, s3_bucket, replace_with=None)
    assert drops == 1 and data == _blob(1)


def test_object_replaced_between_drop_and_resume_is_a_one_line_error(
    s3_server, s3_bucket: str
) -> None:
    with pytest.raises(StorageError) as info:
        _read_through_a_drop(s3_server, s3_bucket, replace_with=_blob(2))
    message = info.value.message
    assert "\n" not in message
    assert message.startswith(f"s3://{s3_bucket}/ds/train-000000.tar: ")
    assert "the object changed while it was being read (ETag no longer matches)" in message
