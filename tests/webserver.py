"""A web server on 127.0.0.1 for the tests of http(s):// and hf:// sources: real HTTP/1.1.

Serves the files of a folder, by path, with what real servers do and do not do:

- ``Range: bytes=a-`` / ``a-b`` answered with 206 and ``Content-Range`` (``ranges=False``: the
  whole body with 200, as Python's own ``http.server`` does), ``ETag`` and ``Last-Modified``
  validators, ``If-Match`` (412 when the file changed), HEAD;
- ``token``: a bearer token the requests must carry (401 otherwise);
- the Hugging Face Hub's layout on top (``/datasets/ORG/NAME/resolve/REV/PATH`` serves
  ``PATH``), for hf:// URLs with ``HF_ENDPOINT`` pointed here;
- faults, one per request in order (``faults``): ``"drop:N"`` (send N body bytes, close),
  ``"stall:N"`` (send N body bytes, then hold the connection silent for ``stall_s``),
  ``"reset"`` (close without answering), ``"429"``/``"503"``/``"500"`` (answer that status);
- :meth:`stop` / :meth:`start` (connections refused meanwhile, open ones cut: a server that
  goes away and comes back on the same port); :meth:`freeze` (a paused server: it accepts and
  never answers, as under SIGSTOP) and :meth:`thaw`.

``sent`` counts body bytes per path and ``requests`` every request (method, path, Range).
Only 127.0.0.1, ever.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import http.server
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

HOST = "127.0.0.1"
HUB = "/datasets/"


class WebServer:
    def __init__(
        self,
        root: Path,
        *,
        ranges: bool = True,
        token: str | None = None,
        faults: Iterable[str] = (),
        stall_s: float = 3.0,
    ) -> None:
        self.root = Path(root)
        self.ranges = ranges
        self.token = token
        self.faults = list(faults)
        self.stall_s = stall_s
        self.sent: Counter[str] = Counter()
        self.requests: list[tuple[str, str, str]] = []
        self.injected: Counter[str] = Counter()
        self.port = 0
        self._lock = threading.Lock()
        self._frozen = threading.Event()
        self._thawed = threading.Event()
        self._thawed.set()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def hub_endpoint(self) -> str:
        return self.url

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        owner = self

        class Handler(_Handler):
            server_owner = owner

        server = http.server.ThreadingHTTPServer(
            (HOST, self.port), Handler, bind_and_activate=False
        )
        server.allow_reuse_address = True
        server.daemon_threads = True
        server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.server_bind()
        server.server_activate()
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Refuse connections from now on and cut the open ones."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            conns, self._conns = set(self._conns), set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                c.close()

    def close(self) -> None:
        self.thaw()
        self.stop()

    def freeze(self) -> None:
        """Accept, and answer nothing (a stopped process keeps its socket open)."""
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    def __enter__(self) -> WebServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- accounting --------------------------------------------------------------------------
    def total_sent(self, suffix: str = "") -> int:
        return sum(n for p, n in self.sent.items() if p.endswith(suffix))

    def _take_fault(self) -> str:
        with self._lock:
            return self.faults.pop(0) if self.faults else "ok"


def etag_of(path: Path) -> str:
    st = path.stat()
    return '"' + hashlib.sha1(f"{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16] + '"'


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_owner: WebServer

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        with self.server_owner._lock:
            self.server_owner._conns.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.server_owner._lock:
            self.server_owner._conns.discard(self.connection)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _path(self) -> Path | None:
        path = self.path.split("?", 1)[0]
        if path.startswith(HUB):  # /datasets/ORG/NAME/resolve/REV/PATH
            parts = path[len(HUB) :].split("/", 4)
            if len(parts) < 5 or parts[2] != "resolve":
                return None
            path = "/" + parts[4]
        target = (self.server_owner.root / path.lstrip("/")).resolve()
        root = self.server_owner.root.resolve()
        if root not in target.parents and target != root:
            return None
        return target

    def _error(self, code: int, text: str = "") -> None:
        body = (text or http.server.BaseHTTPRequestHandler.responses[code][0]).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _serve(self, body: bool) -> None:
        owner = self.server_owner
        owner.requests.append((self.command, self.path, self.headers.get("Range", "")))
        owner._thawed.wait()
        fault = owner._take_fault()
        if fault == "reset":
            owner.injected[fault] += 1
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault in ("429", "500", "503"):
            owner.injected[fault] += 1
            self.close_connection = True
            return self._error(int(fault))
        if owner.token is not None:
            if self.headers.get("Authorization") != f"Bearer {owner.token}":
                return self._error(401, "missing or bad token")
        path = self._path()
        if path is None or not path.is_file():
            return self._error(404)
        size = path.stat().st_size
        etag = etag_of(path)
        if (match := self.headers.get("If-Match")) and match != etag:
            return self._error(412)
        start, end = 0, size - 1
        ranged = False
        spec = self.headers.get("Range")
        if owner.ranges and spec and spec.startswith("bytes="):
            a, _, b = spec[6:].partition("-")
            start = int(a) if a else 0
            end = min(int(b), size - 1) if b else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            ranged = True
        length = end - start + 1
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Length", str(length))
        self.send_header("ETag", etag)
        mtime = email.utils.formatdate(path.stat().st_mtime, usegmt=True)
        self.send_header("Last-Modified", mtime)
        if owner.ranges:
            self.send_header("Accept-Ranges", "bytes")
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if not body:
            return None
        cut = None
        kind, _, n = fault.partition(":")
        if kind in ("drop", "stall") and int(n) < length:
            cut = int(n)
        with path.open("rb") as f:
            f.seek(start)
            left, sent = length if cut is None else cut, 0
            while left > 0:
                chunk = f.read(min(left, 64 << 10))
                if not chunk:
                    break
                try:
                    self.wfile.write(chunk)
                except OSError:
                    break
                sent += len(chunk)
                left -= len(chunk)
        with owner._lock:
            owner.sent[self.path.split("?", 1)[0]] += sent
        if cut is not None:
            owner.injected[kind] += 1
            if kind == "stall":
                time.sleep(owner.stall_s)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
        return None


def serve(root: Path | str, **kw: object) -> WebServer:
    return WebServer(Path(os.fspath(root)), **kw)  # type: ignore[arg-type]
