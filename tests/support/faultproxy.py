"""A loopback TCP proxy in front of an HTTP server that injects faults on a schedule.

Each new client connection takes the next fault from the schedule (then "ok" once it is used
up, or cycling with ``cycle=True``):

- ``"ok"``: pass everything through.
- ``"drop:N"``: pass the request; pass N bytes of the response, then close both sides (a
  connection dropped mid-body; N past the response's end means no fault).
- ``"stall:N"``: like drop, but after N response bytes hold the connection silent for
  ``stall_s`` seconds first (a read timeout on the client), then close.
- ``"reset"``: read the request head, close without answering.
- ``"500"`` / ``"503"``: read the request head, answer an S3-style XML error
  (InternalError / SlowDown) with ``Connection: close``, close.

``injected`` counts the faults that actually took effect (a drop past the response's end does
not count). ``on_fault(fault)``, when given, runs as each fault takes effect, before the client
sees the connection close (e.g. to replace the object a dropped GET was reading). Only
127.0.0.1, ever.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

HOST = "127.0.0.1"

_ERRORS = {
    "500": ("500 Internal Server Error", "InternalError", "We encountered an internal error."),
    "503": ("503 Slow Down", "SlowDown", "Please reduce your request rate."),
}


class FaultProxy:
    def __init__(
        self,
        upstream_port: int,
        schedule: Iterable[str] = (),
        *,
        cycle: bool = False,
        stall_s: float = 3.0,
        on_fault: Callable[[str], object] | None = None,
    ) -> None:
        self.upstream = (HOST, upstream_port)
        self.schedule = list(schedule)
        self.cycle = cycle
        self.stall_s = stall_s
        self.on_fault = on_fault
        self.injected: Counter[str] = Counter()
        self.connections = 0
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((HOST, 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="fault-proxy")

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):  # wakes the accept() below (close alone does not)
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._thread.join(5)

    def set_schedule(self, schedule: Iterable[str], cycle: bool = False) -> None:
        """A new schedule, counted from the next connection; open connections are closed, so
        clients' pooled keep-alive connections cannot bypass it."""
        with self._lock:
            self.schedule = list(schedule)
            self.cycle = cycle
            self.connections = 0
            for s in list(self._open):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _next_fault(self) -> str:
        with self._lock:
            i = self.connections
            self.connections += 1
            if not self.schedule:
                return "ok"
            if self.cycle:
                return self.schedule[i % len(self.schedule)]
            return self.schedule[i] if i < len(self.schedule) else "ok"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            fault = self._next_fault()
            with self._lock:
                self._open.add(client)
            threading.Thread(target=self._handle, args=(client, fault), daemon=True).start()

    def _count(self, fault: str) -> None:
        with self._lock:
            self.injected[fault.split(":", 1)[0]] += 1
        if self.on_fault is not None:
            self.on_fault(fault)

    def _handle(self, client: socket.socket, fault: str) -> None:
        upstream: socket.socket | None = None
        try:
            if fault in ("reset", "500", "503"):
                head = _read_head(client)
                if not head:
                    return
                if fault == "reset":
                    self._count(fault)
                    return
                status, code, message = _ERRORS[fault]
                body = (
                    '<?xml version="1.0" encoding="UTF-8"?>\n'
                    f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
                ).encode()
                client.sendall(
                    f"HTTP/1.1 {status}\r\nContent-Type: application/xml\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )
                self._count(fault)
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_WR)
                    time.sleep(0.05)
                return
            upstream = socket.create_connection(self.upstream)
            limit = None
            if fault.startswith(("drop:", "stall:")):
                limit = int(fault.split(":", 1)[1])
            up = threading.Thread(target=_pump, args=(client, upstream, None), daemon=True)
            up.start()
            hit = _pump(upstream, client, limit)
            if hit:
                self._count(fault)
                if fault.startswith("stall:"):
                    time.sleep(self.stall_s)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(client)
            for s in (client, upstream):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    with contextlib.suppress(OSError):
                        s.close()


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        data += chunk
        if len(data) > 1 << 20:
            break
    return data


def _pump(src: socket.socket, dst: socket.socket, limit: int | None) -> bool:
    """Copy src -> dst until EOF; with ``limit``, stop after that many bytes and return True
    (the fault point was reached)."""
    sent = 0
    try:
        while True:
            want = 65536 if limit is None else min(65536, limit - sent)
            if want <= 0:
                return True
            chunk = src.recv(want)
            if not chunk:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return False
            dst.sendall(chunk)
            sent += len(chunk)
    except OSError:
        return False
