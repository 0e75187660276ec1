"""Which storage errors are retried, how long retries wait, when they stop, and the one line that
describes each error: on botocore's, urllib3's and Python's own exception types."""

from __future__ import annotations

import http.client
import os
import random
import subprocess
import sys

import botocore.exceptions as bce
import pytest
import urllib3.exceptions as u3e

from wdstool.base.errors import StorageError
from wdstool.base.retry import (
    RETRYABLE_CODES,
    RetryPolicy,
    TransientError,
    describe,
    error_code,
    is_retryable,
)


def client_error(code: str, status: int, message: str = "x") -> bce.ClientError:
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {}}
    if status:
        response["ResponseMetadata"]["HTTPStatusCode"] = status
    return bce.ClientError(response, "GetObject")


def wrapped(inner: BaseException) -> OSError:
    """As s3fs raises botocore's errors: an OSError whose cause is the botocore error."""
    try:
        try:
            raise inner
        except Exception as exc:
            raise OSError(5, "wrapped") from exc
    except OSError as outer:
        return outer


class Top:
    """An rng that always draws the upper bound: the bound itself, observable."""

    def uniform(self, lo: float, hi: float) -> float:
        assert lo == 0
        return hi


# --- the policy -------------------------------------------------------------------------------
def test_delays_double_up_to_the_cap_with_full_jitter() -> None:
    policy = RetryPolicy(attempts=9, base_delay=0.1, max_delay=1.0, patience=0.0)
    bounds = [policy.delay(n, Top()) for n in range(0, 8)]
    assert bounds == pytest.approx([0.1, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    draws = [policy.delay(3, random.Random(s)) for s in range(200)]
    assert all(0 <= d <= 0.4 for d in draws) and max(draws) > 0.3 and min(draws) < 0.1
    assert RetryPolicy().attempts == 8 and RetryPolicy().base_delay == 0.1
    assert RetryPolicy().max_delay == 10.0


def test_call_retries_transient_errors_then_returns() -> None:
    slept: list[float] = []
    failures = [ConnectionResetError("reset"), client_error("SlowDown", 503)]

    def fn() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    policy = RetryPolicy(attempts=3, base_delay=0.5, max_delay=0.5, patience=0.0)
    assert policy.call("s3://b/k", fn, sleep=slept.append) == "done"
    assert len(slept) == 2 and all(0 <= s <= 0.5 for s in slept)


def test_call_gives_up_after_attempts_naming_what_and_the_cause() -> None:
    slept: list[float] = []
    calls = []

    def fn() -> None:
        calls.append(1)
        raise client_error("SlowDown", 503)

    with pytest.raises(StorageError) as info:
        RetryPolicy(attempts=4, base_delay=0.01, patience=0.0).call(
            "s3://b/k", fn, sleep=slept.append
        )
    assert len(calls) == 4 and len(slept) == 3
    assert info.value.message == (
        "s3://b/k: giving up after 4 attempts: throttled by the store (SlowDown SlowDown)"
    )
    assert isinstance(info.value.__cause__, bce.ClientError)


def test_call_lets_other_errors_through_at_once() -> None:
    calls = []

    def fn() -> None:
        calls.append(1)
        raise client_error("AccessDenied", 403)

    with pytest.raises(bce.ClientError):
        RetryPolicy().call("s3://b/k", fn, sleep=pytest.fail)
    assert calls == [1]


# --- what is transient ------------------------------------------------------------------------
@pytest.mark.parametrize("code", sorted(RETRYABLE_CODES))
def test_retryable_codes(code: str) -> None:
    assert is_retryable(client_error(code, 0))
    assert is_retryable(wrapped(client_error(code, 0)))


@pytest.mark.parametrize(
    ("code", "status", "retry"),
    [
        ("", 500, True),
        ("Whatever", 502, True),
        ("Whatever", 599, True),
        ("TooMany", 429, True),
        ("Whatever", 499, False),
        ("AccessDenied", 403, False),
        ("NoSuchKey", 404, False),
        ("PreconditionFailed", 412, False),  # the object changed: never retried into a mix
        ("InvalidRange", 416, False),
        ("", 0, False),
    ],
)
def test_status_decides_for_other_codes(code: str, status: int, retry: bool) -> None:
    assert is_retryable(client_error(code, status)) is retry
    assert is_retryable(wrapped(client_error(code, status))) is retry


@pytest.mark.parametrize(
    "exc",
    [
        bce.EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
        bce.ConnectTimeoutError(endpoint_url="http://127.0.0.1:9"),
        bce.ReadTimeoutError(endpoint_url="http://127.0.0.1:9"),
        bce.ConnectionClosedError(endpoint_url="http://127.0.0.1:9"),
        bce.HTTPClientError(error="boom"),
        bce.IncompleteReadError(actual_bytes=1, expected_bytes=2),
        bce.ResponseStreamingError(error="boom"),
        u3e.ProtocolError("broken"),
        u3e.ReadTimeoutError(None, "/", "slow"),
        u3e.DecodeError("bad"),
        ConnectionResetError("reset"),
        TimeoutError("slow"),
        http.client.IncompleteRead(b"x"),
        TransientError("short body"),
        type("ClientPayloadError", (OSError,), {})("aiohttp"),
        type("ServerDisconnectedError", (OSError,), {})("aiohttp"),
        type("ClientOSError", (OSError,), {})("aiohttp"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_transient_errors(exc: BaseException) -> None:
    assert is_retryable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("bad"),
        FileNotFoundError("gone"),
        PermissionError("no"),
        OSError(5, "io"),
        bce.NoCredentialsError(),
        bce.ParamValidationError(report="bad"),
        wrapped(bce.NoCredentialsError()),
    ],
    ids=lambda e: type(e).__name__,
)
def test_other_errors_are_not_transient(exc: BaseException) -> None:
    assert not is_retryable(exc)


def test_aiobotocore_errors_count_as_botocore_ones() -> None:
    """s3fs is async: its transient errors come from aiobotocore's module, wrapped."""
    from aiobotocore.response import AioReadTimeoutError

    inner = AioReadTimeoutError(endpoint_url="http://127.0.0.1:9/b/k")
    assert is_retryable(wrapped(inner))
    assert describe(wrapped(inner)).startswith("AioReadTimeoutError: Read timeout on endpoint")


def test_a_botocore_cause_decides_over_its_wrapper() -> None:
    # the wrapper's own type would be transient; the botocore error inside is not
    outer = wrapped(client_error("AccessDenied", 403))
    inner_transient = ConnectionResetError("reset")
    inner_transient.__cause__ = client_error("AccessDenied", 403)
    assert not is_retryable(outer)
    assert not is_retryable(inner_transient)


def test_error_code() -> None:
    assert error_code(client_error("SlowDown", 503)) == ("SlowDown", 503)
    assert error_code(client_error("", 0)) == ("", 0)
    assert error_code(ValueError("x")) == ("", 0)
    odd = bce.ClientError({"Error": {}}, "GetObject")
    odd.response = {"Error": None, "ResponseMetadata": None}  # what some stores send back
    assert error_code(odd) == ("", 0)


# --- one line that says what went wrong -------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "status", "text"),
    [
        ("NoSuchBucket", 404, "bucket does not exist (NoSuchBucket)"),
        ("NoSuchKey", 404, "object not found (NoSuchKey)"),
        ("404", 404, "object not found (NoSuchKey)"),
        ("NotFound", 404, "object not found (NoSuchKey)"),
        ("InvalidAccessKeyId", 403, "credentials rejected (InvalidAccessKeyId)"),
        ("SignatureDoesNotMatch", 403, "credentials rejected (SignatureDoesNotMatch)"),
        ("ExpiredToken", 400, "credentials rejected (ExpiredToken)"),
        ("InvalidToken", 400, "credentials rejected (InvalidToken)"),
        ("AccessDenied", 403, "access denied (AccessDenied)"),
        ("AllAccessDisabled", 403, "access denied (AllAccessDisabled)"),
        ("403", 0, "access denied (403)"),
        ("", 403, "access denied (403)"),
        ("PreconditionFailed", 412, "the object changed while it was being read (ETag no longer matches)"),
        ("", 412, "the object changed while it was being read (ETag no longer matches)"),
        ("AccessDenied", 0, "access denied (AccessDenied)"),
        ("AllAccessDisabled", 0, "access denied (AllAccessDisabled)"),
        ("PreconditionFailed", 0, "the object changed while it was being read (ETag no longer matches)"),
        ("SlowDown", 0, "throttled by the store (SlowDown SlowDown)"),
        ("SlowDown", 503, "throttled by the store (SlowDown SlowDown)"),
        ("503", 0, "throttled by the store (503 SlowDown)"),
        ("", 503, "throttled by the store (503 SlowDown)"),
    ],
)  # fmt: skip
def test_client_errors_are_named(code: str, status: int, text: str) -> None:
    assert describe(client_error(code, status)) == text
    assert describe(wrapped(client_error(code, status))) == text


def test_other_client_errors_show_code_and_message_on_one_line() -> None:
    exc = client_error("InternalError", 500, "We\n   encountered  an error")
    assert describe(exc) == (
        "InternalError: An error occurred (InternalError) when calling the GetObject operation: "
        "We encountered an error"
    )
    assert describe(client_error("", 500)).startswith("500: An error occurred")


def test_describe_names_missing_credentials_and_the_endpoint_only() -> None:
    assert describe(bce.NoCredentialsError()) == (
        "no AWS credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, "
        "or pass storage_options)"
    )
    exc = bce.EndpointConnectionError(endpoint_url="http://127.0.0.1:9/bucket/key?X-Amz=secret")
    assert describe(exc) == "cannot connect to endpoint http://127.0.0.1:9"


def test_describe_plain_errors() -> None:
    assert describe(PermissionError("no  way\nin")) == "access denied (no way in)"
    assert describe(FileNotFoundError("gone")) == "not found (gone)"
    assert describe(ConnectionResetError("peer\n reset")) == "ConnectionResetError: peer reset"
    assert describe(TimeoutError()) == "TimeoutError"


def test_an_outage_is_waited_out_for_patience_seconds_past_the_attempts() -> None:
    """Giving up takes both: ``attempts`` failures in a row and ``patience`` seconds without
    progress (a server down for a few seconds is waited for; one down for good is an error).
    The default waits a minute; WDSTOOL_RETRY_PATIENCE sets it for the command line."""
    assert RetryPolicy().patience == 60.0 and RetryPolicy().read_timeout == 30.0
    policy = RetryPolicy(attempts=3, base_delay=0.5, max_delay=1.0, patience=20.0)
    assert not policy.exhausted(3, 19.9) and not policy.exhausted(2, 100.0)
    assert policy.exhausted(3, 20.0)
    slept: list[float] = []
    calls = []

    def down() -> None:
        calls.append(1)
        raise ConnectionRefusedError("refused")

    with pytest.raises(StorageError, match="giving up after"):
        policy.call("http://127.0.0.1:1/x.tar", down, sleep=slept.append)
    assert len(calls) > 3 and sum(slept) >= 20.0 - 1.0  # kept trying for the patience
    env = {**os.environ, "WDSTOOL_RETRY_PATIENCE": "7.5"}
    out = subprocess.run(
        [sys.executable, "-c", "from wdstool.base.retry import DEFAULT_RETRY as d; print(d.patience)"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "7.5"
