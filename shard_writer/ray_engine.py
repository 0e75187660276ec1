"""``pack --engine ray``: the same pack, with probing and shard writing run as Ray tasks.

Nothing here schedules anything: the driver computes the layout with the same pure function as
the local engine, and hands the same picklable work items (probe chunks, :class:`ShardTask`)
to Ray through a ``concurrent.futures.Executor`` facade, so :mod:`shard_writer.pack` runs one
code path for both engines and the output is byte-identical. Ray retries a task whose worker
or node dies (``max_retries``); a shard task is idempotent (temporary name, atomic publish).

- Without an address (``--ray-address`` or ``RAY_ADDRESS``) a local Ray instance is started
  on 127.0.0.1 only and stopped at the end; with one, the driver joins that cluster after
  checking within seconds that its address answers (``ray.init`` on an unreachable address
  waits for minutes).
- A cluster that refuses this process is one line naming the cause and its fix, before Ray's
  own connection attempt (which retries for ~20 s and ends in "Failed to connect"): token
  authentication (``RAY_AUTH_MODE=token``) without a token or with another one, found by one
  call to the GCS with the token the driver would send; after it, a Ray or Python version other
  than the cluster's.
- Errors raised on purpose in a task (one-line :class:`WdsToolError`) come back as values and
  are raised in the driver unchanged, not as Ray's multi-line ``RayTaskError``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from wdstool.base.errors import ConfigError, WdsToolError

log = logging.getLogger(__name__)
INSTALL_HINT = "engine='ray' needs Ray: pip install -e '.[ray]'"
TASK_RETRIES = 3  # re-runs of a task whose worker process or node died
CONNECT_TIMEOUT = 5.0


def _task(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[str, Any, str]:
    """Runs on a Ray worker: (status, value, node)."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    try:
        return "ok", fn(*args, **kwargs), node
    except WdsToolError as exc:
        return "error", exc, node


class _RayFuture(Future):
    def __init__(self, ray: Any, ref: Any) -> None:
        super().__init__()
        self._ray = ray
        self._ref = ref

    def cancel(self) -> bool:
        with contextlib.suppress(Exception):
            self._ray.cancel(self._ref)
        return super().cancel()


class RayExecutor(Executor):
    """Runs ``fn(*args)`` as a Ray task (1 CPU each, spread over the nodes); counts the tasks
    each node ran."""

    def __init__(self, ray: Any) -> None:
        self._ray = ray
        # SPREAD: pack moves bytes; spreading the tasks uses every node's network and disks
        # from the start instead of filling one node first
        self._remote = ray.remote(
            num_cpus=1, max_retries=TASK_RETRIES, scheduling_strategy="SPREAD"
        )(_task)
        self._pending: set[_RayFuture] = set()
        self._lock = threading.Lock()
        self.nodes: dict[str, Counter[str]] = {}  # function name -> node -> tasks

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        ref = self._remote.options(name=f"wdstool.{fn.__name__}").remote(fn, args, kwargs)
        out = _RayFuture(self._ray, ref)
        with self._lock:
            self._pending.add(out)

        def settle(done: Future) -> None:
            with self._lock:
                self._pending.discard(out)
                if out.done():
                    return
                try:
                    status, value, node = done.result()
                except BaseException as exc:
                    out.set_exception(exc)
                    return
                self.nodes.setdefault(fn.__name__, Counter())[node] += 1
                if status == "ok":
                    out.set_result(value)
                else:
                    out.set_exception(value)

        ref.future().add_done_callback(settle)
        return out

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            with self._lock:
                pending = list(self._pending)
            for fut in pending:
                fut.cancel()

    def cpus(self) -> int:
        return int(self._ray.cluster_resources().get("CPU", 0))

    def tasks_per_node(self, fn_name: str) -> dict[str, int]:
        """{"<node address>/<node id prefix>": tasks} for the tasks running ``fn_name``."""
        addresses = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in self._ray.nodes()}
        counts = self.nodes.get(fn_name, Counter())
        return {f"{addresses.get(n, '?')}/{n[:8]}": k for n, k in sorted(counts.items())}


def _gcs_host_port(address: str) -> tuple[str, int] | None:
    """host and port of a cluster address (``HOST:PORT``, ``ray://HOST:PORT``); None for
    Ray's own keywords (``auto``, ``local``)."""
    rest = address.split("://", 1)[-1].rstrip("/")
    if address in ("auto", "local") or ":" not in rest:
        return None
    host, _, port = rest.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise ConfigError(f"ray_address={address}: expected HOST:PORT") from None


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    hp = _gcs_host_port(address)
    if hp is None:
        return
    try:
        socket.create_connection(hp, timeout=timeout).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise ConfigError(
            f"ray_address={address}: cannot reach a Ray cluster there ({reason}); "
            "start one with `ray start --head`, or leave ray_address= and RAY_ADDRESS unset "
            "for a local instance"
        ) from None


def _auth_token() -> tuple[str | None, str]:
    """The token a Ray driver sends with ``RAY_AUTH_MODE=token``, and where it came from:
    ``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, or ``~/.ray/auth_token``."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    where = Path(path).expanduser() if path else Path.home() / ".ray" / "auth_token"
    with contextlib.suppress(OSError):
        return where.read_text().strip() or None, str(where)
    return None, "RAY_AUTH_TOKEN_PATH" if path else "~/.ray/auth_token"


AUTH_FIX = (
    "export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<the cluster's token> (`ray get-auth-token` "
    "on the head prints it; RAY_AUTH_TOKEN_PATH=FILE reads it from a file)"
)


def check_authenticated(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """One call to the cluster's GCS with the token this process would send (none unless
    ``RAY_AUTH_MODE=token``): a refusal is a one-line :class:`ConfigError` saying why and what
    to set. Anything else (another Ray's GCS, a Ray Client address) is left to ``ray.init``."""
    hp = _gcs_host_port(address)
    if hp is None or address.startswith("ray://"):
        return
    try:
        import grpc  # Ray's own dependency
    except ImportError:  # pragma: no cover - Ray always brings it
        return
    token, source = _auth_token()
    sending = os.environ.get("RAY_AUTH_MODE", "").lower() == "token" and token is not None
    metadata = (("authorization", f"Bearer {token}"),) if sending else ()
    host, port = hp
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        call = channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId")
        try:
            call(b"", timeout=timeout, metadata=metadata)
            return
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAUTHENTICATED:
                return
    if sending:
        why = f"the cluster refused the token from {source}"
    elif os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        why = f"RAY_AUTH_MODE=token but no token was found (RAY_AUTH_TOKEN, {source})"
    else:
        why = "the cluster requires token authentication and this process sends no token"
    raise ConfigError(f"ray_address={address}: {why}: {AUTH_FIX}")


def _version_mismatch(address: str, exc: Exception) -> ConfigError | None:
    """Ray's multi-line "Version mismatch" as one line with the fix, or None."""
    text = " ".join(str(exc).split())
    m = re.search(
        r"Version mismatch: The cluster was started with: Ray: (\S+) Python: (\S+) "
        r"This process on .*? was started with: Ray: (\S+) Python: (\S+)",
        text,
    )
    if m is None:
        return None
    ray_c, py_c, ray_here, py_here = m.groups()
    return ConfigError(
        f"ray_address={address}: version mismatch: the cluster runs Ray {ray_c} on Python "
        f"{py_c}, this process Ray {ray_here} on Python {py_here}: run wdstool with the "
        f"cluster's versions (pip install 'ray[default]=={ray_c}' in a Python {py_c} venv), "
        "or start the cluster with this one's"
    )


@contextlib.contextmanager
def ray_executor(address: str | None, num_cpus: int) -> Iterator[RayExecutor]:
    """A RayExecutor on the cluster at ``address`` (or ``RAY_ADDRESS``), else on a local
    instance with ``num_cpus`` CPUs started on 127.0.0.1 and stopped on the way out."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        # a local instance serves this process only: keep every Ray server on loopback
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    if ray.is_initialized():  # a library caller's own Ray session: use it, leave it running
        yield RayExecutor(ray)
        return
    if address is not None:
        check_reachable(address)
        check_authenticated(address)
    kwargs: dict[str, Any] = {
        "log_to_driver": False,
        "logging_level": logging.WARNING,
        "configure_logging": True,
    }
    # Ray's driver prints cluster events (a worker died, a raylet is gone, a task is retried)
    # on stdout, some through handles bound before any redirect_stdout; keep stdout for what
    # wdstool itself prints (--json) by pointing file descriptor 1 at stderr for the session
    with _stdout_to_stderr():
        try:
            if address is None:
                # "local": a new instance even when `ray start` left one on this machine
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **kwargs)
            else:
                ray.init(address=address, **kwargs)
        except ConnectionError as exc:
            raise ConfigError(f"ray_address={address}: {' '.join(str(exc).split())}") from None
        except RuntimeError as exc:
            mismatch = _version_mismatch(address or "local", exc)
            if mismatch is None:
                raise
            raise mismatch from None
        try:
            yield RayExecutor(ray)
        finally:
            ray.shutdown()


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all
        yield
        return
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
