"""A web server on 127.0.0.1 for the tests of http(s):// and hf:// sources: real HTTP/1.1, in a
process of its own (DataLoader workers forked by a test must not inherit its listening socket:
a server that "went away" would still be listening in them).

Serves the files of a folder, by path, with what real servers do and do not do:

- ``Range: bytes=a-`` / ``a-b`` answered with 206 and ``Content-Range`` (``ranges=False``: the
  whole body with 200, as Python's own ``http.server`` does), ``ETag`` and ``Last-Modified``
  validators, ``If-Match`` (412 when the file changed), HEAD;
- ``token``: a bearer token the requests must carry (401 otherwise);
- the Hugging Face Hub's layout on top (``/datasets/ORG/NAME/resolve/REV/PATH`` serves
  ``PATH``; ``/api/datasets/ORG/NAME/tree/REV/PATH?recursive=true`` lists the files below
  ``PATH``, paginated), for hf:// URLs with ``HF_ENDPOINT`` pointed here;
- faults, one per request in order (``faults``): ``"drop:N"`` (send N body bytes, close),
  ``"stall:N"`` (send N body bytes, then hold the connection silent for ``stall_s``),
  ``"reset"`` (close without answering), ``"429"``/``"503"``/``"500"`` (answer that status);
- :meth:`stop` / :meth:`start` (the process killed: connections refused meanwhile, open ones
  cut; then a new one on the same port); :meth:`freeze` (SIGSTOP: the kernel still accepts
  connections, nothing answers) and :meth:`thaw` (SIGCONT).

``sent`` counts body bytes per path (what the kernel took, also of a body the client cut),
``requests`` every request (method, path, Range), ``resets`` the connections a client cut with
a body still coming (what ``python -m http.server`` logs as a ``ConnectionResetError`` or
``BrokenPipeError``), over the lives of the process. Only 127.0.0.1, ever.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import http.server
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
HUB = "/datasets/"
HUB_API = "/api/datasets/"


class _Server:
    def __init__(
        self,
        root: Path,
        *,
        ranges: bool = True,
        token: str | None = None,
        faults: Iterable[str] = (),
        stall_s: float = 3.0,
        port: int = 0,
        rate: float = 0.0,
        tree_page: int = 1000,
    ) -> None:
        self.root = Path(root)
        self.rate = rate
        self.tree_page = tree_page  # entries per page of the Hub's tree API
        self.ranges = ranges
        self.token = token
        self.faults = list(faults)
        self.stall_s = stall_s
        self.sent: Counter[str] = Counter()
        self.requests: list[tuple[str, str, str]] = []
        self.injected: Counter[str] = Counter()
        self.resets = 0
        self.port = port
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
        if self._server is not None:
            return
        owner = self

        class Handler(_ControlHandler):
            server_owner = owner

        server = http.server.ThreadingHTTPServer(
            (HOST, self.port), Handler, bind_and_activate=False
        )
        server.allow_reuse_address = True
        server.daemon_threads = True
        server.handle_error = lambda request, client: None  # a client gone: not worth a trace
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

    def __enter__(self) -> _Server:
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
    # TCP_NODELAY, as nginx does on keep-alive connections: with Nagle on, the last segment of
    # a body waits for the client's delayed ACK, 40 ms a response (a header walk's 8 KB pieces
    # took 45 ms each)
    disable_nagle_algorithm = True
    server_owner: _Server

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        with self.server_owner._lock:
            self.server_owner._conns.add(self.connection)

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):  # reading the next request
            self._reset()

    def _reset(self) -> None:
        self.close_connection = True
        with self.server_owner._lock:
            self.server_owner.resets += 1

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

    def _tree(self) -> None:
        """The Hub's tree API, ``/api/datasets/ORG/NAME/tree/REV[/PATH]?recursive=true``: the
        served folder's files under PATH as JSON (path, size, oid), in pages of ``page``
        entries linked by ``Link: <...>; rel="next"`` as the Hub does."""
        path, _, query = self.path.partition("?")
        parts = path[len(HUB_API) :].split("/", 4)
        if len(parts) < 4 or parts[2] != "tree":
            return self._error(404)
        below = parts[4] if len(parts) > 4 else ""
        root = self.server_owner.root.resolve()
        folder = (root / below).resolve()
        if not folder.is_dir() or (root not in folder.parents and folder != root):
            return self._error(404, "Entry not found")
        entries = [
            {
                "type": "file",
                "path": str(p.relative_to(root)),
                "size": p.stat().st_size,
                "oid": etag_of(p).strip('"'),
            }
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        ]
        cursor = int(dict(q.split("=", 1) for q in query.split("&") if "=" in q).get("cursor", 0))
        page = self.server_owner.tree_page
        body = json.dumps(entries[cursor : cursor + page]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if cursor + page < len(entries):
            link = f"{self.server_owner.url}{path}?recursive=true&cursor={cursor + page}"
            self.send_header("Link", f'<{link}>; rel="next"')
        self.end_headers()
        self.wfile.write(body)
        return None

    def _serve(self, body: bool) -> None:
        owner = self.server_owner
        owner.requests.append((self.command, self.path, self.headers.get("Range", "")))
        owner._thawed.wait()
        if self.path.startswith(HUB_API):
            return self._tree()
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
        if owner.token is not None and self.headers.get("Authorization") != f"Bearer {owner.token}":
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
        if cut is None and not owner.rate:  # the kernel copies: a server that costs no CPU
            self.wfile.flush()
            sent = 0
            with path.open("rb") as f:
                try:  # in pieces, so that a body the client cuts counts what went out
                    while sent < length:
                        n = os.sendfile(
                            self.connection.fileno(), f.fileno(), start + sent,
                            min(length - sent, 1 << 20),
                        )  # fmt: skip
                        if not n:
                            break
                        sent += n
                except (ConnectionResetError, BrokenPipeError):
                    self._reset()
                except OSError:
                    self.close_connection = True
            with owner._lock:
                owner.sent[self.path.split("?", 1)[0]] += sent
            return None
        with path.open("rb") as f:
            f.seek(start)
            left, sent = length if cut is None else cut, 0
            while left > 0:
                chunk = f.read(min(left, 64 << 10))
                if not chunk:
                    break
                try:
                    self.wfile.write(chunk)
                except (ConnectionResetError, BrokenPipeError):
                    self._reset()
                    break
                except OSError:
                    break
                if owner.rate:  # bytes per second: a body that takes its time
                    time.sleep(len(chunk) / owner.rate)
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


CONTROL = "/__control__"


class _ControlHandler(_Handler):
    """The test process's window into the server process: its counters, as JSON."""

    def do_GET(self) -> None:
        if self.path != CONTROL:
            return super().do_GET()
        owner = self.server_owner
        with owner._lock:
            body = json.dumps(
                {
                    "sent": dict(owner.sent),
                    "requests": owner.requests,
                    "injected": dict(owner.injected),
                    "resets": owner.resets,
                }
            ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return None


class WebServer:
    """The server (see the module's docstring), run by ``python -m tests.support.webserver``."""

    def __init__(self, root: Path, **options: Any) -> None:
        """``options``: the server process's (:class:`_Server`: ``ranges``, ``token``,
        ``faults``, ``stall_s``, ``rate``), checked here rather than in the process."""
        inspect.signature(_Server).bind(root, **options)
        self.root = Path(root)
        self.config = {**options, "faults": list(options.get("faults", ()))}
        self.port = 0
        self._proc: subprocess.Popen | None = None
        self._past = {"sent": Counter(), "requests": [], "injected": Counter(), "resets": 0}
        self.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        if self._proc is not None:
            return
        cmd = [sys.executable, "-m", "tests.support.webserver", str(self.root), str(self.port)]
        env = {**os.environ, "WEBSERVER_CONFIG": json.dumps(self.config)}
        repo = Path(__file__).resolve().parents[2]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=repo, env=env, text=True)
        line = self._proc.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("port "):
            raise RuntimeError(f"web server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.config["faults"] = []  # a restarted server has used its faults

    def _live(self) -> dict:
        if self._proc is None:
            return {"sent": {}, "requests": [], "injected": {}, "resets": 0}
        import urllib.request

        with urllib.request.urlopen(self.url + CONTROL, timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        """Kill the server: connections refused from now on, open ones cut."""
        if self._proc is None:
            return
        live = self._live()
        self._past["sent"].update(live["sent"])
        self._past["requests"] += [tuple(r) for r in live["requests"]]
        self._past["injected"].update(live["injected"])
        self._past["resets"] += live["resets"]
        self._proc.kill()
        self._proc.wait()
        self._proc = None

    def freeze(self) -> None:
        """SIGSTOP: connections are accepted by the kernel, nothing answers."""
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def close(self) -> None:
        self.thaw()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def __enter__(self) -> WebServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- accounting ----------------------------------------------------------------------
    @property
    def sent(self) -> Counter:
        return self._past["sent"] + Counter(self._live()["sent"])

    @property
    def requests(self) -> list[tuple[str, str, str]]:
        return self._past["requests"] + [tuple(r) for r in self._live()["requests"]]

    @property
    def injected(self) -> Counter:
        return self._past["injected"] + Counter(self._live()["injected"])

    @property
    def resets(self) -> int:
        """Connections a client reset or closed while a body was going out (all lives)."""
        return self._past["resets"] + self._live()["resets"]

    def total_sent(self, suffix: str = "") -> int:
        return sum(n for p, n in self.sent.items() if p.endswith(suffix))


def _main() -> None:
    root, port = sys.argv[1], int(sys.argv[2])
    config = json.loads(os.environ["WEBSERVER_CONFIG"])
    server = _Server(Path(root), **config, port=port)
    print(f"port {server.port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    _main()
