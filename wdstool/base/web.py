"""http(s):// and hf:// objects: the reader's own HTTP client, with errors that say what happened.

fsspec's HTTP filesystem turns a refused connection into FileNotFoundError (a short outage read
as "shard not found"), has no read timeout (a paused server is waited on forever) and cannot
resume on a server that ignores ``Range``. Here (urllib3, which botocore already brings):

- :func:`web_opener` opens a shard as one streaming GET from a byte offset (``Range: bytes=N-``)
  for :class:`wdstool.base.remote.RangeReader`, which retries and resumes it. Resumes carry the
  first response's validator (``If-Match`` on a strong ETag, else ``If-Unmodified-Since`` on
  ``Last-Modified``), and the size must stay the same: a shard replaced mid-read is an error,
  not a mix of two files. A server that ignores ``Range`` (answers 200) is read as one stream; a
  resume then reads it again from its start and drops what was delivered (said once).
- Statuses: 404/410 "not found"; 401/403 "access denied" with how to pass a token; 416 "shorter
  than"; 412 "changed while it was read"; 429 and 5xx, refused or reset connections, timeouts
  and bodies cut short are transient: retried.
- A read timeout of its own (``RetryPolicy.read_timeout``): a server that stops sending is a
  retry, never a silent wait.
- ``hf://datasets/ORG/NAME[@REV]/PATH`` (and ``hf://ORG/NAME/...`` for models) reads the Hugging
  Face Hub's resolve URL (``HF_ENDPOINT``, default https://huggingface.co) with the token of
  ``storage_options["token"]``, ``HF_TOKEN`` or huggingface_hub's login, when there is one.
  ``storage_options={"headers": {...}}`` adds headers to every request (any web server).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any
from urllib.parse import quote, unquote

from wdstool.base import counters
from wdstool.base.errors import ShardError, StorageError
from wdstool.base.opened import Opened
from wdstool.base.retry import DEFAULT_RETRY, RetryPolicy, TransientError

log = logging.getLogger(__name__)
WEB_SCHEMES = ("http://", "https://", "hf://")
HF_DEFAULT_ENDPOINT = "https://huggingface.co"
CONNECT_TIMEOUT = 10.0
_POOLS: dict[int, Any] = {}  # one connection pool per process (a forked worker makes its own)
_POOLS_LOCK = threading.Lock()
_NO_RANGES: set[str] = set()  # hosts said once to ignore Range
# A body left part read is cut (its connection closed) unless its rest is at most this: a piece
# asked for (``RangeReader.page``) is always read out. A server that ignores Range sends a
# shard whole; its rest is read out up to UNRANGED_DRAIN: a cut costs ~4 MB anyway (what the
# server pushed into the socket buffers before the reset: 3.9 MB of a 30 MB body measured on
# loopback), and python -m http.server logs every cut as a ConnectionResetError.
DRAIN = 1 << 20
UNRANGED_DRAIN = 8 << 20


def is_web(url: str) -> bool:
    return url.lower().startswith(WEB_SCHEMES)


def _pool() -> Any:
    import urllib3

    pid = os.getpid()
    with _POOLS_LOCK:
        pool = _POOLS.get(pid)
        if pool is None:
            pool = _POOLS[pid] = urllib3.PoolManager(num_pools=64, maxsize=16, retries=False)
    return pool


def hf_url(url: str) -> str:
    """The Hub's resolve URL of ``hf://datasets/ORG/NAME[@REV]/PATH`` (``hf://ORG/NAME/...``:
    a model repository; ``spaces/`` too), on ``HF_ENDPOINT``."""
    rest = url[len("hf://") :]
    kind = ""
    for prefix in ("datasets/", "spaces/"):
        if rest.startswith(prefix):
            kind, rest = prefix, rest[len(prefix) :]
    parts = rest.split("/", 2)
    if len(parts) < 3 or not parts[2]:
        raise StorageError(f"{url}: not an hf:// file URL (hf://datasets/ORG/NAME/PATH)")
    org, name, path = parts
    name, _, revision = name.partition("@")
    endpoint = os.environ.get("HF_ENDPOINT", HF_DEFAULT_ENDPOINT).rstrip("/")
    rev = quote(unquote(revision or "main"), safe="")  # refs%2Fconvert%2Fparquet as refs/...
    return f"{endpoint}/{kind}{org}/{name}/resolve/{rev}/{quote(path)}"


def hf_token(storage_options: dict[str, Any] | None) -> str | None:
    token = (storage_options or {}).get("token")
    if isinstance(token, str) and token:
        return token
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token()


def resolve(url: str, storage_options: dict[str, Any] | None) -> tuple[str, dict[str, str]]:
    """(the http(s) URL to request, the headers of every request) for a web URL."""
    headers = {str(k): str(v) for k, v in ((storage_options or {}).get("headers") or {}).items()}
    if url.lower().startswith("hf://"):
        token = hf_token(storage_options)
        if token and not any(k.lower() == "authorization" for k in headers):
            headers["Authorization"] = f"Bearer {token}"
        return hf_url(url), headers
    return url, headers


def _denied(url: str, status: int) -> StorageError:
    how = (
        "log in (huggingface-cli login) or set HF_TOKEN for a gated or private repository"
        if url.lower().startswith("hf://")
        else "pass credentials: storage_options={'headers': {'Authorization': 'Bearer ...'}}"
    )
    return StorageError(f"{url}: access denied (HTTP {status}): {how}")


def check_status(url: str, status: int, offset: int = 0) -> None:
    """The error an HTTP status means for ``url`` (nothing for 200/206)."""
    if status in (200, 206):
        return
    if status in (404, 410):
        raise ShardError(f"{url}: not found (HTTP {status})")
    if status in (401, 403):
        raise _denied(url, status)
    if status == 416:
        raise ShardError(f"{url}: shorter than {offset} bytes (HTTP 416)")
    if status == 412:
        raise StorageError(f"{url}: the file changed on the server while it was being read")
    if status == 429 or status >= 500:
        raise TransientError(f"HTTP {status}")
    raise StorageError(f"{url}: HTTP {status}")


def request(
    url: str,
    storage_options: dict[str, Any] | None,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    read_timeout: float = DEFAULT_RETRY.read_timeout,
) -> Any:
    """One request to a web URL (redirects followed), the body not read yet."""
    import urllib3

    target, base = resolve(url, storage_options)
    timeout = urllib3.Timeout(connect=min(CONNECT_TIMEOUT, read_timeout), read=read_timeout)
    retries = urllib3.Retry(total=None, connect=0, read=0, status=0, other=0, redirect=10)
    try:
        return _pool().request(
            method,
            target,
            headers={**base, **(headers or {})},
            timeout=timeout,
            retries=retries,
            preload_content=False,
            decode_content=False,
        )
    except urllib3.exceptions.MaxRetryError as exc:  # no retries here: the cause is the error
        if isinstance(exc.reason, Exception):
            raise exc.reason from None
        raise


def _total(resp: Any, offset: int) -> int | None:
    content_range = resp.headers.get("Content-Range", "")
    if "/" in content_range and content_range.rsplit("/", 1)[1].isdigit():
        return int(content_range.rsplit("/", 1)[1])
    length = resp.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def _validator(resp: Any) -> str | None:
    etag = resp.headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return f"etag:{etag}"
    modified = resp.headers.get("Last-Modified")
    return f"modified:{modified}" if modified else None


def _conditions(version: str | None) -> dict[str, str]:
    if version is None:
        return {}
    kind, _, value = version.partition(":")
    return {"If-Match": value} if kind == "etag" else {"If-Unmodified-Since": value}


class _Body:
    """A response's body. ``finish`` reads out a rest of up to ``drain`` bytes and keeps the
    connection (the server sees a clean end, the next request skips a handshake); a longer
    rest is cut (``close``): the server then logs a reset connection, but sends no more."""

    def __init__(self, resp: Any, drain: int = DRAIN) -> None:
        self.resp, self.drain = resp, drain

    def read(self, n: int = -1) -> bytes:
        return self.resp.read(None if n < 0 else n)

    def finish(self) -> None:
        left = self.resp.length_remaining
        if left is None or left > self.drain:
            self.resp.close()
            return
        got = 0
        try:
            while chunk := self.resp.read(1 << 16):
                got += len(chunk)
        except Exception:  # cut short meanwhile: nothing to keep
            self.resp.close()
        else:
            self.resp.release_conn()
        finally:
            counters.count("network_bytes", got)

    def close(self) -> None:
        self.resp.close()  # a body read part way: its connection is not reused


class _Skipped(_Body):
    """A body whose first ``skip`` bytes (already delivered) are dropped as it is read (they
    were fetched all the same: counted as network bytes)."""

    def __init__(self, resp: Any, skip: int, drain: int = DRAIN) -> None:
        super().__init__(resp, drain)
        self.skip = skip

    def read(self, n: int = -1) -> bytes:
        while self.skip:
            dropped = self.resp.read(min(self.skip, 1 << 20))
            if not dropped:
                return b""
            self.skip -= len(dropped)
            counters.count("network_bytes", len(dropped))
        return super().read(n)


def web_opener(
    url: str, storage_options: dict[str, Any] | None, retry: RetryPolicy = DEFAULT_RETRY
):
    """An opener for :class:`wdstool.base.remote.RangeReader`: a GET from ``offset``."""

    def open_at(offset: int, version: str | None, end: int | None = None) -> Opened:
        span = f"{offset}-{'' if end is None else end - 1}"
        headers = {"Range": f"bytes={span}", **_conditions(version)}
        resp = request(url, storage_options, headers=headers, read_timeout=retry.read_timeout)
        try:
            check_status(url, resp.status, offset)
        except BaseException:
            resp.close()  # its body unread: the connection is not reused
            raise
        size = _total(resp, offset if resp.status == 206 else 0)
        if resp.status == 206:
            start = resp.headers.get("Content-Range", "bytes 0-").split()[-1].split("-")[0]
            if start.isdigit() and int(start) != offset:
                resp.close()
                raise StorageError(f"{url}: asked for byte {offset}, the server sent {start}")
            return Opened(_Body(resp), size, version or _validator(resp))
        # 200: the server ignores Range: the body runs to the end, and a resume (or any new
        # request) reads the file again from its start
        if offset:
            host = url.split("/", 3)[2] if "://" in url else url
            if host not in _NO_RANGES:
                _NO_RANGES.add(host)
                log.info(
                    "%s: the server ignores range requests; a shard whose connection broke is "
                    "read again from its start",
                    host,
                )
            if version is not None and _validator(resp) not in (None, version):
                resp.close()
                raise StorageError(f"{url}: the file changed on the server while it was being read")
        body = _Skipped(resp, offset, UNRANGED_DRAIN) if offset else _Body(resp, UNRANGED_DRAIN)
        return Opened(body, size, version or _validator(resp), bounded=False, rereads=True)

    return open_at


def read_web(
    url: str,
    storage_options: dict[str, Any] | None = None,
    start: int | None = None,
    end: int | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
) -> bytes:
    """Bytes ``[start, end)`` of a web object (the whole of it by default), retried: what a
    manifest, an index or a ranged read of ``wdstool show`` needs. ShardError "not found" on
    404, StorageError for what retries do not fix."""
    headers = {}
    if start is not None or end is not None:
        headers["Range"] = f"bytes={start or 0}-{'' if end is None else end - 1}"

    def get() -> bytes:
        resp = request(url, storage_options, headers=headers, read_timeout=retry.read_timeout)
        counters.count("requests")  # a 404 too: an index looked for is a request
        try:
            check_status(url, resp.status, start or 0)
            data = resp.read()
        except BaseException:
            resp.close()  # a body left unread: the connection is not reused
            raise
        resp.release_conn()
        counters.count("network_bytes", len(data))
        if resp.status == 200 and headers:  # no Range support: cut the span out
            data = data[start or 0 : end]
        return data

    return retry.call(url, get)


def web_size(
    url: str, storage_options: dict[str, Any] | None = None, retry: RetryPolicy = DEFAULT_RETRY
) -> int:
    """The size of a web object (a HEAD request)."""

    def head() -> int:
        resp = request(url, storage_options, method="HEAD", read_timeout=retry.read_timeout)
        counters.count("requests")
        resp.release_conn()  # a HEAD has no body
        check_status(url, resp.status)
        size = _total(resp, 0)
        if size is None:
            raise StorageError(f"{url}: the server does not say its size")
        return size

    return retry.call(url, head)


__all__ = [
    "WEB_SCHEMES",
    "check_status",
    "hf_token",
    "hf_url",
    "is_web",
    "read_web",
    "request",
    "resolve",
    "web_opener",
    "web_size",
]
