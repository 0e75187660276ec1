"""Retrying storage operations, and one-line descriptions of what went wrong.

- :class:`RetryPolicy`: exponential backoff with full jitter on connection errors, timeouts,
  5xx and throttling; :func:`is_retryable` decides.
- :func:`describe` turns any storage exception into one line naming the cause; credentials
  never appear in it.
"""

from __future__ import annotations

import http.client
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from wdstool.base.errors import StorageError

T = TypeVar("T")
RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "500",
        "502",
        "503",
        "504",
    }
)


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How transient storage errors are retried.

    ``attempts`` counts tries in a row without progress: a stream that keeps delivering bytes
    between failures never runs out. A reader gives up when ``attempts`` tries in a row failed
    and ``patience`` seconds passed since its last byte (a server down for a few seconds is
    waited for; one down for good is an error within about ``patience + max_delay +
    read_timeout`` seconds of the last byte). Delays grow as ``base_delay * 2**n`` up to
    ``max_delay``, each drawn uniformly below that bound (full jitter), so many workers do not
    retry in step. ``read_timeout``: seconds an open web connection may stay silent before it
    counts as a failure (S3 has its client's own).
    """

    attempts: int = 8
    base_delay: float = 0.1
    max_delay: float = 10.0
    patience: float = 60.0
    read_timeout: float = 30.0

    def exhausted(self, failures: int, since_progress: float) -> bool:
        """Give up: ``failures`` tries in a row failed, ``since_progress`` seconds without a
        byte."""
        return failures >= self.attempts and since_progress >= self.patience

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        bound = min(self.max_delay, self.base_delay * (2 ** max(0, failures - 1)))
        return (rng or random).uniform(0, bound)

    def call(
        self, what: str, fn: Callable[[], T], sleep: Callable[[float], None] = time.sleep
    ) -> T:
        """Run ``fn`` with retries; raise StorageError naming ``what`` when they run out."""
        failures = 0
        started, waited = time.monotonic(), 0.0  # waited: what ``sleep`` was asked (a test's
        while True:  # sleep does not advance the clock)
            try:
                return fn()
            except Exception as exc:
                if not is_retryable(exc):
                    raise
                failures += 1
                if self.exhausted(failures, max(time.monotonic() - started, waited)):
                    raise StorageError(
                        f"{what}: giving up after {failures} attempts: {describe(exc)}"
                    ) from exc
                delay = self.delay(failures)
                waited += delay
                sleep(delay)


def _default() -> RetryPolicy:
    """The default policy; ``WDSTOOL_RETRY_PATIENCE`` (seconds) sets how long an outage is
    waited out, for the command line too (``make_loader`` takes ``retry=``)."""
    patience = os.environ.get("WDSTOOL_RETRY_PATIENCE")
    if patience is None:
        return RetryPolicy()
    try:
        return RetryPolicy(patience=float(patience))
    except ValueError:
        raise StorageError(f"WDSTOOL_RETRY_PATIENCE={patience!r}: give seconds") from None


DEFAULT_RETRY = _default()


def error_code(exc: BaseException) -> tuple[str, int]:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error") or {}
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0
        return str(err.get("Code") or ""), int(status)
    return "", 0


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (s3fs re-raises botocore errors as OSError subclasses)."""
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out and len(out) < 8:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _botocore_error(exc: BaseException) -> BaseException | None:
    for e in _chain(exc):
        if type(e).__module__.startswith(("botocore", "aiobotocore")):
            return e
    return None


def is_retryable(exc: BaseException) -> bool:
    """Transient: connection trouble, timeouts, truncated bodies, 5xx, throttling."""
    inner = _botocore_error(exc)
    if inner is not None and inner is not exc:
        return _is_retryable(inner)
    return _is_retryable(exc)


def _is_retryable(exc: BaseException) -> bool:
    try:
        import botocore.exceptions as bce
        import urllib3.exceptions as u3e
    except ImportError:  # pragma: no cover - botocore comes with s3fs
        bce = u3e = None  # type: ignore[assignment]
    if bce is not None:
        if isinstance(exc, bce.ClientError):
            code, status = error_code(exc)
            return code in RETRYABLE_CODES or status >= 500 or status == 429
        if isinstance(
            exc,
            (
                bce.ConnectionError,  # endpoint, proxy, connection closed, timeouts
                bce.HTTPClientError,
                bce.IncompleteReadError,
                bce.ResponseStreamingError,
            ),
        ):
            return True
        if isinstance(exc, (u3e.ProtocolError, u3e.TimeoutError, u3e.DecodeError)):
            return True  # refused (NewConnectionError), reset, cut short, read timeouts
        if isinstance(exc, u3e.MaxRetryError) and isinstance(exc.reason, Exception):
            return _is_retryable(exc.reason)
    if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout, http.client.HTTPException)):
        return True
    if isinstance(exc, TransientError):
        return True
    # s3fs and aiohttp wrap transient trouble in OSError subclasses with errno unset
    name = type(exc).__name__
    return name in {"ClientPayloadError", "ServerDisconnectedError", "ClientOSError"}


class TransientError(Exception):
    """Raised by readers for conditions worth a retry (a body shorter than announced, ...)."""


def describe(exc: BaseException) -> str:
    """One line saying what went wrong, without credentials."""
    inner = _botocore_error(exc)
    if inner is not None:
        exc = inner
    try:
        import botocore.exceptions as bce
    except ImportError:  # pragma: no cover
        bce = None  # type: ignore[assignment]
    if bce is not None:
        if isinstance(exc, bce.NoCredentialsError):
            return (
                "no AWS credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or "
                "AWS_PROFILE, or pass storage_options)"
            )
        if isinstance(exc, bce.EndpointConnectionError):
            import urllib.parse

            parts = urllib.parse.urlsplit(str(exc.kwargs.get("endpoint_url", "")))
            return f"cannot connect to endpoint {parts.scheme}://{parts.netloc}"
        if isinstance(exc, bce.ClientError):
            code, status = error_code(exc)
            return _client_error_text(code, status, exc)
    web = _web_text(exc)
    if web is not None:
        return web
    if isinstance(exc, PermissionError):
        return f"access denied ({_clean(exc)})"
    if isinstance(exc, FileNotFoundError):
        return f"not found ({_clean(exc)})"
    return f"{type(exc).__name__}: {_clean(exc)}" if str(exc) else type(exc).__name__


def _web_text(exc: BaseException) -> str | None:
    """urllib3's errors in words (they carry object reprs and URLs with query strings)."""
    try:
        import urllib3.exceptions as u3e
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, u3e.MaxRetryError) and isinstance(exc.reason, Exception):
        exc = exc.reason
    if isinstance(exc, u3e.NewConnectionError):
        errno = getattr(getattr(exc, "__context__", None), "errno", None)
        why = "connection refused" if errno == 111 or "refused" in str(exc) else "no connection"
        return f"cannot connect to the server ({why})"
    if isinstance(exc, u3e.ReadTimeoutError):
        return "the server sent nothing within the read timeout"
    if isinstance(exc, u3e.ConnectTimeoutError):
        return "connecting to the server timed out"
    if isinstance(exc, u3e.ProtocolError):
        return f"the connection broke ({_clean(exc).split(': ', 1)[0][:80]})"
    return None


def _client_error_text(code: str, status: int, exc: BaseException) -> str:
    if code in ("NoSuchBucket",):
        return "bucket does not exist (NoSuchBucket)"
    if code in ("NoSuchKey", "404", "NotFound"):
        return "object not found (NoSuchKey)"
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"):
        return f"credentials rejected ({code})"
    if code in ("AccessDenied", "403", "AllAccessDisabled") or status == 403:
        return f"access denied ({code or status})"
    if code == "PreconditionFailed" or status == 412:
        return "the object changed while it was being read (ETag no longer matches)"
    if code in ("SlowDown", "503") or status == 503:
        return f"throttled by the store ({code or status} SlowDown)"
    return f"{code or status}: {_clean(exc)}"


def _clean(exc: BaseException) -> str:
    return " ".join(str(exc).split())
