"""The local S3 helper (``python -m wdstool.base.locals3``): a bad bucket name is one line
naming the rule before any server starts, and an error after it started leaves none running."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from wdstool.base import locals3
from wdstool.base.locals3 import BUCKET_RULE, bucket_name_problem


@pytest.mark.parametrize("name", ["ds", "My-Data", "-data", "data-", "a..b", "192.168.1.10",
                                  "xn--data", "data-s3alias", "a" * 64, "my_data"])  # fmt: skip
def test_invalid_bucket_names_have_a_reason(name: str) -> None:
    assert bucket_name_problem(name)


@pytest.mark.parametrize("name", ["my-data", "wdstool-demo", "abc", "data.v2", "a" * 63])
def test_valid_bucket_names_pass(name: str) -> None:
    assert bucket_name_problem(name) is None


def _servers() -> set[int]:
    """Local S3 server processes of this user (their command line names the child flag)."""
    found = set()
    for p in psutil.process_iter(["cmdline", "uids"]):
        cmd = p.info["cmdline"] or []
        if "wdstool.base.locals3" in cmd and "--child" in cmd:
            found.add(p.pid)
    return found


def test_a_bad_bucket_name_is_one_line_and_starts_nothing(tmp_path) -> None:
    before = _servers()
    proc = subprocess.run(
        [sys.executable, "-m", "wdstool.base.locals3", "--detach", "--bucket", "ds"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.strip() == (
        f"Error: --bucket 'ds': not a valid S3 bucket name ({BUCKET_RULE})"
    )
    assert _servers() <= before


def test_an_error_after_the_server_started_stops_it(monkeypatch) -> None:
    started = []

    def refuse(self, name: str) -> None:
        started.append(self.pid)
        raise ConnectionError("the server went away")

    monkeypatch.setattr(locals3.LocalS3, "make_bucket", refuse)
    monkeypatch.setattr(sys, "argv", ["locals3", "--detach", "--bucket", "my-data"])
    with pytest.raises(SystemExit) as exit_:
        locals3.main()
    (pid,) = started
    assert f"server pid {pid} stopped" in str(exit_.value) and "my-data" in str(exit_.value)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert pid not in _servers()
