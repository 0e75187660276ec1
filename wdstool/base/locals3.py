"""A local S3-compatible server for tests, the demo and benchmarks: moto's, on 127.0.0.1 only.

It runs in its own process (so it does not share a GIL with the code it serves; it exits when
its parent does) on a free port
chosen by the kernel; ``LocalS3`` starts it, waits until it answers, and stops it on exit::

    with LocalS3() as s3:
        storage_options = s3.storage_options  # endpoint_url + dummy credentials
        s3.make_bucket("data")

``python -m wdstool.base.locals3`` runs one in the foreground and prints its endpoint. Needs the
``dev`` extra (``moto[server]``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import signal
import subprocess
import sys
from typing import Any

HOST = "127.0.0.1"
ACCESS_KEY = "testing"
SECRET_KEY = "testing"  # moto accepts any credentials; these are not secrets
REGION = "us-east-1"
BUCKET_RULE = (
    "3-63 characters: lowercase letters, digits, dots and hyphens, starting and ending with a "
    "letter or digit"
)


def bucket_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid S3 bucket name (AWS's general-purpose rules), or None."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name):
        return BUCKET_RULE
    if ".." in name or ".-" in name or "-." in name:
        return "no two adjacent dots, nor a dot next to a hyphen"
    with contextlib.suppress(ValueError):
        ipaddress.IPv4Address(name)
        return "not formatted as an IP address"
    for prefix in ("xn--", "sthree-", "amzn-s3-demo-"):
        if name.startswith(prefix):
            return f"not starting with {prefix!r} (reserved)"
    for suffix in ("-s3alias", "--ol-s3", "--x-s3", "--table-s3"):
        if name.endswith(suffix):
            return f"not ending with {suffix!r} (reserved)"
    return None


def _child(detached: bool = False) -> None:
    """Run the server; report its port on stdout; stop when stdin closes (the parent left),
    or, ``detached``, at SIGTERM or SIGINT."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        print(f"ERROR moto is not installed ({exc}); pip install -e '.[dev]'", flush=True)
        return
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)
    server.start()
    print(f"PORT {server.get_host_and_port()[1]}", flush=True)
    if detached:  # until killed: `kill $WDSTOOL_LOCAL_S3_PID`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the parent's pipe is gone)
        stop = {signal.SIGTERM, signal.SIGINT}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # sigwait takes them, not their action
        signal.sigwait(stop)
    else:
        sys.stdin.read()  # EOF when the parent closes the pipe or dies
    server.stop()


class LocalS3:
    """moto's S3 server in a child process on 127.0.0.1, any free port."""

    def __init__(self, env: dict[str, str] | None = None, *, detached: bool = False) -> None:
        """``env``: extra environment for the server, e.g. ``INITIAL_NO_AUTH_ACTION_COUNT=0``
        to make moto check credentials and IAM policies. ``detached``: the server outlives this
        process (its own session) and runs until killed (:attr:`pid`)."""
        self.port: int | None = None
        self._env = env
        self._detached = detached
        self._proc: subprocess.Popen[str] | None = None

    @property
    def endpoint_url(self) -> str:
        assert self.port is not None, "start() first"
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        """The server process (for CPU accounting)."""
        assert self._proc is not None, "start() first"
        return self._proc.pid

    @property
    def storage_options(self) -> dict[str, Any]:
        return {
            "endpoint_url": self.endpoint_url,
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"region_name": REGION},
        }

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point AWS tools (and wdstool) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
        }

    def start(self) -> LocalS3:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "wdstool.base.locals3", "--child"]
            + (["--detached"] if self._detached else []),
            stdin=subprocess.DEVNULL if self._detached else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if self._detached else None,
            text=True,
            env={**os.environ, **(self._env or {})},
            start_new_session=self._detached,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"local S3 server did not start: {line[6:] or 'no answer'}")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        """Stop the server (a detached one too: it waits for SIGTERM, not for its stdin)."""
        if self._proc is None:
            return
        with contextlib.suppress(OSError):
            if self._detached:
                self._proc.terminate()
            else:
                self._proc.stdin.close()  # type: ignore[union-attr]
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self):
        """A boto3-compatible botocore S3 client for this server."""
        import botocore.session

        return botocore.session.get_session().create_client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def make_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)


def main() -> None:  # pragma: no cover - interactive helper
    """``python -m wdstool.base.locals3 [--bucket NAME ...] [--detach]``: a server in the
    foreground until Ctrl-C, or, with ``--detach``, in the background, printing the ``export``
    lines to use it (``eval "$(python -m wdstool.base.locals3 --detach --bucket b)"``) and the
    server's pid as ``WDSTOOL_LOCAL_S3_PID`` (``kill $WDSTOOL_LOCAL_S3_PID`` stops it).

    Bucket names are checked before a server starts; an error after it started stops it, so
    that nothing is left running."""
    import argparse

    if sys.argv[1:2] == ["--child"]:
        _child(detached="--detached" in sys.argv[2:])
        return
    parser = argparse.ArgumentParser(prog="python -m wdstool.base.locals3")
    parser.add_argument("--bucket", action="append", default=[], help="create this bucket")
    parser.add_argument("--detach", action="store_true", help="run in the background")
    args = parser.parse_args()
    for name in args.bucket:
        problem = bucket_name_problem(name)
        if problem:
            sys.exit(f"Error: --bucket {name!r}: not a valid S3 bucket name ({problem})")
    try:
        s3 = LocalS3(detached=args.detach).start()
    except RuntimeError as exc:
        sys.exit(f"Error: {exc}")
    try:
        for name in args.bucket:
            s3.make_bucket(name)
    except Exception as exc:
        s3_pid = s3.pid
        s3.stop()
        sys.exit(
            f"Error: --bucket {name!r}: {type(exc).__name__}: {exc} (server pid {s3_pid} stopped)"
        )
    if args.detach:
        print(
            f"# a local S3 server (moto) at {s3.endpoint_url}, pid {s3.pid}; "
            "kill $WDSTOOL_LOCAL_S3_PID stops it"
        )
        for k, v in {**s3.env, "WDSTOOL_LOCAL_S3_PID": str(s3.pid)}.items():
            print(f"export {k}={v}")
        return
    with s3:
        print(f"local S3 server at {s3.endpoint_url} (Ctrl-C stops it)", flush=True)
        for k, v in s3.env.items():
            print(f"export {k}={v}")
        with contextlib.suppress(KeyboardInterrupt):
            s3._proc.wait()  # type: ignore[union-attr]


if __name__ == "__main__":  # pragma: no cover
    main()
