"""A counting HTTP reverse proxy on 127.0.0.1 in front of an S3 endpoint (tests only).

Every request is forwarded unchanged (keep-alive, streamed bodies) and recorded as
``(method, path)``, so a test can count the GETs each shard received through this proxy --
one proxy per simulated node gives per-node download counts -- and the body bytes sent back
for each GET, so a test can count the bytes a reader downloaded; :meth:`get_log` has each GET
with its ``Range`` and the bytes it sent back, so a test can count the bytes per request.
"""

from __future__ import annotations

import http.client
import http.server
import threading
import urllib.parse
from collections import Counter

HOST = "127.0.0.1"
HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


class CountingProxy:
    def __init__(self, upstream: str) -> None:
        u = urllib.parse.urlsplit(upstream)
        assert u.hostname == HOST, "loopback only"
        self.upstream = (u.hostname, u.port)
        self.requests: list[tuple[str, str]] = []
        self.sent: Counter[str] = Counter()  # path -> body bytes sent back to GETs
        self.log: list[tuple[str, str, int]] = []  # each GET: path, Range header, body bytes
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                with proxy._lock:
                    proxy.requests.append((self.command, urllib.parse.unquote(self.path)))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status, resp.reason)
                head = self.command == "HEAD"  # no body: the upstream's length is the object's
                for k, v in resp.getheaders():
                    if k.lower() not in HOP and (head or k.lower() != "content-length"):
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                if self.command == "GET":
                    path = urllib.parse.unquote(self.path).split("?")[0]
                    with proxy._lock:
                        proxy.sent[path] += len(data)
                        proxy.log.append((path, self.headers.get("Range") or "", len(data)))

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        self._server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self._server.server_address[1]}"

    def gets(self, suffix: str = "") -> Counter[str]:
        """GET requests per path (paths ending with ``suffix``)."""
        with self._lock:
            return Counter(
                p.split("?")[0]
                for m, p in self.requests
                if m == "GET" and p.split("?")[0].endswith(suffix)
            )

    def get_log(self, suffix: str = "") -> list[tuple[str, str, int]]:
        """(path, Range, body bytes) of each GET of a path ending with ``suffix``, in order."""
        with self._lock:
            return [e for e in self.log if e[0].endswith(suffix)]

    def bytes_sent(self, suffix: str = "") -> int:
        """Body bytes sent back to GET requests for paths ending with ``suffix``."""
        with self._lock:
            return sum(n for p, n in self.sent.items() if p.endswith(suffix))

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
