"""`wdstool pack/inspect/verify` against a real S3 endpoint (moto's server on loopback)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest

from shard_writer.dest import ETagHasher
from tests.conftest import REPO, dir_bytes, make_tree, run_cli
from wdstool.base.locals3 import LocalS3


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return make_tree(tmp_path_factory.mktemp("s3src") / "src", {"a": 25, "b": 20, "c": 15}, seed=9)


@pytest.fixture(scope="module")
def local_ref(tree: Path, tmp_path_factory) -> Path:
    ref = tmp_path_factory.mktemp("s3ref") / "ref"
    run_cli("pack", str(tree), str(ref), "--max-count", "7", "--workers", "1", "-q")
    return ref


def _objects(s3_server, bucket: str, prefix: str) -> dict[str, bytes]:
    fs = fsspec.filesystem("s3", **s3_server.storage_options, skip_instance_cache=True)
    out = {}
    for path in fs.find(f"{bucket}/{prefix}"):
        rel = path[len(f"{bucket}/{prefix}/") :]
        out[rel] = fs.cat_file(path)
    return out


def test_pack_to_s3_matches_local_pack_byte_for_byte(
    tree: Path, local_ref: Path, s3_server, s3_bucket: str
) -> None:
    url = f"s3://{s3_bucket}/datasets/v1"
    r = run_cli(
        "pack",
        str(tree),
        url,
        "--max-count",
        "7",
        "--workers",
        "2",
        "--json",
        "--endpoint-url",
        s3_server.endpoint_url,
        env={k: v for k, v in s3_server.env.items() if k != "AWS_ENDPOINT_URL"},
    )
    summary = json.loads(r.stdout)
    assert summary["samples"] == 60 and summary["written_shards"] == 9
    stored = _objects(s3_server, s3_bucket, "datasets/v1")
    assert stored == dir_bytes(local_ref)  # shards and manifest; no markers or temporaries left
    # inspect and verify read it back over S3 (credentials and endpoint from the environment)
    info = json.loads(run_cli("inspect", url, "--json", env=s3_server.env).stdout)
    assert info["num_samples"] == 60 and len(info["sample_keys"]) == 5
    v = run_cli("verify", url, "--decode", "--json", env=s3_server.env)
    assert json.loads(v.stdout)["ok"] is True


def test_verify_on_s3_names_a_corrupt_shard(tree: Path, s3_server, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/ds"
    run_cli("pack", str(tree), url, "--max-count", "20", "-q", env=s3_server.env)
    fs = fsspec.filesystem("s3", **s3_server.storage_options, skip_instance_cache=True)
    key = f"{s3_bucket}/ds/train-000001.tar"
    data = bytearray(fs.cat_file(key))
    data[5000] ^= 0xFF
    fs.pipe_file(key, bytes(data))
    r = run_cli("verify", url, "-q", env=s3_server.env, check=False)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "train-000001.tar" in r.stderr


@pytest.mark.full
def test_resume_after_kill_on_s3_reuses_uploaded_shards(
    tree: Path, local_ref: Path, s3_server, s3_bucket: str, tmp_path: Path
) -> None:
    url = f"s3://{s3_bucket}/resume"
    env = {**os.environ, **s3_server.env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wdstool", "pack", str(tree), url, "--max-count", "7", "-q"],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    fs = fsspec.filesystem("s3", **s3_server.storage_options, skip_instance_cache=True)

    def markers() -> int:
        fs.invalidate_cache()
        return len(fs.glob(f"{s3_bucket}/resume/.wdstool-pack/train-*.json"))

    # the pack runs in 50 ms slices and is looked at while it is stopped: a listing on a busy
    # machine can take longer than the whole pack, which then finished between two looks
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        os.killpg(proc.pid, signal.SIGSTOP)
        if proc.poll() is not None or markers() >= 3:
            break
        os.killpg(proc.pid, signal.SIGCONT)
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):  # gone already: the assert below says so
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    fs.invalidate_cache()
    assert not fs.exists(f"{s3_bucket}/resume/index.json"), "the pack finished before the kill"
    done = len(fs.glob(f"{s3_bucket}/resume/.wdstool-pack/train-*.json"))
    assert done >= 3
    r = run_cli("pack", str(tree), url, "--max-count", "7", "--json", env=s3_server.env)
    summary = json.loads(r.stdout)
    assert summary["reused_shards"] >= done  # checked by size + ETag, not re-uploaded
    assert summary["reused_shards"] + summary["written_shards"] == 9
    assert _objects(s3_server, s3_bucket, "resume") == dir_bytes(local_ref)


def test_rerun_of_a_complete_s3_pack_is_a_no_op(tree: Path, s3_server, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/again"
    run_cli("pack", str(tree), url, "--max-count", "30", "-q", env=s3_server.env)
    r = run_cli("pack", str(tree), url, "--max-count", "30", "--json", env=s3_server.env)
    assert json.loads(r.stdout)["up_to_date"] is True


@pytest.mark.parametrize("size", [3 * 2**20, 11 * 2**20 + 12345])
def test_etag_hasher_matches_s3_single_and_multipart(
    s3_server, s3_bucket: str, tmp_path: Path, size: int
) -> None:
    """The ETag computed locally is the one S3 stores, for a single PUT and for a multipart
    upload (s3fs switches at 2 parts; the minimum part size S3 allows is 5 MiB)."""
    part = 5 * 2**20
    data = os.urandom(size)
    local = tmp_path / "blob"
    local.write_bytes(data)
    fs = fsspec.filesystem("s3", **s3_server.storage_options, skip_instance_cache=True)
    fs.put_file(str(local), f"{s3_bucket}/blob", chunksize=part)
    stored = fs.info(f"{s3_bucket}/blob")["ETag"]
    h = ETagHasher(part)
    for i in range(0, size, 1_000_003):  # feed in pieces that straddle part boundaries
        h.update(data[i : i + 1_000_003])
    assert h.etag() == stored
    assert ("-" in stored) == (size >= 2 * part)


# --- errors: one line naming the URL and the cause; never a credential ----------------------
@pytest.fixture(scope="module")
def auth_s3():
    """A second server that checks credentials: the first 3 actions are free (bucket, user,
    key), then every request needs a known key, and the new user has no permissions."""
    import botocore.session

    with LocalS3(env={"INITIAL_NO_AUTH_ACTION_COUNT": "3"}) as s3:
        s3.make_bucket("locked")
        iam = botocore.session.get_session().create_client(
            "iam",
            endpoint_url=s3.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        iam.create_user(UserName="nobody")
        key = iam.create_access_key(UserName="nobody")["AccessKey"]
        yield s3, key["AccessKeyId"], key["SecretAccessKey"]


def _one_line_error(r: subprocess.CompletedProcess, *secrets: str) -> str:
    assert r.returncode != 0
    err = r.stderr.strip()
    assert err.startswith("Error: ") and "\n" not in err, r.stderr
    assert "Traceback" not in r.stderr
    for s in secrets:
        assert s not in r.stderr and s not in r.stdout
    return err


def test_missing_bucket_is_one_line(tree: Path, s3_server) -> None:
    r = run_cli("pack", str(tree), "s3://no-such-bucket/x", env=s3_server.env, check=False)
    err = _one_line_error(r)
    assert "s3://no-such-bucket/x" in err and "bucket does not exist" in err


def test_unknown_credentials_are_rejected_without_echoing_them(tree: Path, auth_s3) -> None:
    s3, _, _ = auth_s3
    secret = "wJalrXUtnFEMI-not-a-real-secret-KEY"
    env = {**s3.env, "AWS_ACCESS_KEY_ID": "AKIAUNKNOWNKEY000000", "AWS_SECRET_ACCESS_KEY": secret}
    for args in (("pack", str(tree), "s3://locked/x"), ("inspect", "s3://locked/x")):
        r = run_cli(*args, env=env, check=False)
        err = _one_line_error(r, secret, "AKIAUNKNOWNKEY000000")
        assert "s3://locked/x" in err and "credentials rejected (InvalidAccessKeyId)" in err


def test_denied_access_is_one_line(tree: Path, auth_s3) -> None:
    s3, key_id, secret = auth_s3
    env = {**s3.env, "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}
    r = run_cli("pack", str(tree), "s3://locked/x", env=env, check=False)
    err = _one_line_error(r, secret)
    assert "s3://locked/x" in err and "access denied (AccessDenied)" in err
    r = run_cli("verify", "s3://locked/x", env=env, check=False)
    assert "access denied (AccessDenied)" in _one_line_error(r, secret)


def test_unreachable_endpoint_gives_up_with_the_endpoint_named(tree: Path, s3_server) -> None:
    with socketserver_port() as port:  # a port nothing listens on
        env = {**s3_server.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        r = run_cli("pack", str(tree), "s3://b/x", env=env, check=False)
    err = _one_line_error(r)
    assert "s3://b/x" in err and "giving up after" in err
    assert f"cannot connect to endpoint http://127.0.0.1:{port}" in err


class socketserver_port:
    """Reserve a free loopback port, then release it (connections to it are refused)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.mark.full
def test_pack_through_faults_gives_the_same_bytes(
    tree: Path, local_ref: Path, s3_server, s3_bucket: str
) -> None:
    """503 SlowDown, 500, resets and responses cut short on every other new connection: the
    pack retries and finishes with exactly the bytes of a fault-free pack."""
    from tests.support.faultproxy import FaultProxy

    faults = ["503", "ok", "500", "ok", "reset", "ok", "drop:200", "ok"]
    with FaultProxy(s3_server.port, faults, cycle=True) as proxy:
        env = {**s3_server.env, "AWS_ENDPOINT_URL": proxy.endpoint_url}
        url = f"s3://{s3_bucket}/faulty"
        r = run_cli("pack", str(tree), url, "--max-count", "7", "--json", env=env)
        injected = dict(proxy.injected)
    assert json.loads(r.stdout)["samples"] == 60
    assert _objects(s3_server, s3_bucket, "faulty") == dir_bytes(local_ref)
    for kind in ("503", "500", "reset", "drop"):
        assert injected.get(kind, 0) >= 1, injected
