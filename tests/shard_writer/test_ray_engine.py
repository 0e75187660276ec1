"""`wdstool pack --engine ray`: a local Ray instance, a two-node cluster on loopback, a Ray
worker killed mid-pack, and the errors a user meets first. Output must equal --engine local."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shard_writer.dest import STATE_DIR
from tests.conftest import REPO, dir_bytes, run_cli
from tests.s3.test_pack_from_s3 import make_odd_tree, upload_tree
from tests.shard_writer.test_listing import image_rows, write_listing

# every Ray server a test starts stays on 127.0.0.1; Ray reads this when it is imported
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
os.environ.update(LOOPBACK)
ray = pytest.importorskip("ray", reason="the ray extra is not installed")
# Every test that starts Ray lives in this file: make test runs files on two processes
# (pytest-xdist, --dist loadfile) and ray_processes() sees every Ray process on the machine
pytestmark = pytest.mark.slow
RAY_PROCS = ("raylet", "gcs_server", "ray::", "default_worker.py", "log_monitor.py", "monitor.py")


def ray_processes() -> dict[int, str]:
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(p in cmd for p in RAY_PROCS):
            out[int(pid)] = cmd[:120]
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """Photo-like 450x380 JPEGs: re-encoding them is real work (~5 ms each), so tasks last long
    enough for the second node's worker to start and take its share."""
    root = tmp_path_factory.mktemp("raysrc") / "src"
    run_cli("sample-data", str(root), "--images", str(IMAGES), "--classes", "4", "-q")
    return root


IMAGES, SHARDS = 400, 16
PACK_OPTS = ["--max-count", "25", "--quality", "90", "--workers", "2"]


@pytest.fixture(scope="module")
def reference(tree: Path, tmp_path_factory) -> Path:
    ref = tmp_path_factory.mktemp("rayref") / "ref"
    run_cli("pack", str(tree), str(ref), *PACK_OPTS, "-q")
    return ref


@pytest.fixture(scope="module")
def cluster():
    """A head node and a second node (1 CPU each) on 127.0.0.1, in this process's session."""
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()


@pytest.mark.full
def test_index_counts_on_ray_as_here_and_goes_on_after_a_kill(tmp_path: Path) -> None:
    """`wdstool index --out DIR --engine ray`: the header scans run as Ray tasks and give the
    index a local run gives; a run killed part way leaves its finished batches, and the next
    one (here on Ray) counts only the rest."""
    from shard_writer.index_folder import IndexOptions, write_index_folder
    from tests.support.img2dataset import write_shards

    src = tmp_path / "shards"
    write_shards(src, shards=6, per_shard=40, seed=5)
    args = ["--count-by", "scan", "--batch", "1", "--workers", "2", "--json", "-q"]
    run_cli("index", str(src), "--out", str(tmp_path / "local"), *args)

    def killed(done: int, total: int) -> None:
        if done >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        options = IndexOptions(count_by="scan", batch=1, workers=1)  # type: ignore[arg-type]
        write_index_folder([str(src)], str(tmp_path / "ray"), options, progress=killed)
    env = {"RAY_ADDRESS": "", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    r = run_cli(
        "index", str(src), "--out", str(tmp_path / "ray"), *args, "--engine", "ray", env=env
    )
    summary = json.loads(r.stdout)
    assert summary["batches"] == {"kept": 2, "counted": 4}
    assert summary["counted_by"] == {"side_files": 0, "headers": 6}
    assert dir_bytes(tmp_path / "ray") == dir_bytes(tmp_path / "local")


@pytest.mark.full
def test_local_ray_instance_gives_local_bytes_and_leaves_no_process(
    tree: Path, reference: Path, tmp_path: Path
) -> None:
    before = set(ray_processes())
    r = run_cli(
        "pack",
        str(tree),
        str(tmp_path / "out"),
        *PACK_OPTS,
        "--engine",
        "ray",
        "--json",
        env={"RAY_ADDRESS": ""},
    )
    summary = json.loads(r.stdout)
    assert summary["engine"] == "ray" and summary["written_shards"] == SHARDS
    assert sum(summary["shards_per_node"].values()) == SHARDS
    assert all(node.startswith("127.0.0.1/") for node in summary["shards_per_node"])
    assert dir_bytes(tmp_path / "out") == dir_bytes(reference)
    assert "engine" not in (tmp_path / "out" / "index.json").read_text()
    # a command's own summary fields stay beside Ray's (reshard: renamed/duplicates)
    r = run_cli(
        "reshard",
        str(tmp_path / "out"),
        str(tmp_path / "again"),
        "--engine",
        "ray",
        "--workers",
        "2",
        "--json",
        env={"RAY_ADDRESS": ""},
    )
    summary = json.loads(r.stdout)
    assert summary["engine"] == "ray" and summary["renamed"] == 0 and "duplicates" in summary
    deadline = time.monotonic() + 20
    while (left := set(ray_processes()) - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes outlived the pack: {ray_processes()}"


# SRC a listing, and SRC and DEST on S3: the same bytes as --engine local (local Ray
# instances, before the module's cluster starts)
def test_a_listing_gives_the_local_bytes(tmp_path: Path) -> None:
    rows = image_rows(tmp_path, 30, seed=11, labels=["u", "v"])
    for i, r in enumerate(rows):
        r.update(caption=f"c{i}", extra=i)
    listing = write_listing(tmp_path / "l.parquet", rows)
    args = ["--max-count", "4", "--workers", "2"]
    run_cli("pack", str(listing), str(tmp_path / "local"), *args, "-q")
    env = {"RAY_ADDRESS": "", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    r = run_cli(
        "pack", str(listing), str(tmp_path / "ray"), *args, "--engine", "ray", "--json", env=env
    )
    summary = json.loads(r.stdout)
    assert summary["engine"] == "ray" and sum(summary["shards_per_node"].values()) == 8
    assert dir_bytes(tmp_path / "ray") == dir_bytes(tmp_path / "local")


@pytest.mark.full
def test_s3_to_s3_equals_local_pack(tmp_path: Path, s3_server, s3_bucket) -> None:
    """The normal cluster case: SRC and DEST both on S3, probing and shards as Ray tasks."""
    odd_tree = make_odd_tree(tmp_path)
    src = upload_tree(s3_server, odd_tree, s3_bucket, "raw")
    dest = f"s3://{s3_bucket}/packed"
    common = ["--max-count", "4", "--workers", "2", "--json"]
    run_cli("pack", str(odd_tree), str(tmp_path / "ref"), *common)
    env = {k: v for k, v in s3_server.env.items() if k != "AWS_ENDPOINT_URL"}
    ep = ["--endpoint-url", s3_server.endpoint_url]
    out = run_cli("pack", src, dest, *common, *ep, "--engine", "ray", env=env)
    summary = json.loads(out.stdout)
    assert summary["engine"] == "ray" and sum(summary["shards_per_node"].values()) == 5
    fs = s3_server.client()
    got = {
        o["Key"][len("packed/") :]: fs.get_object(Bucket=s3_bucket, Key=o["Key"])["Body"].read()
        for o in fs.list_objects_v2(Bucket=s3_bucket, Prefix="packed/")["Contents"]
        if not o["Key"].startswith("packed/.")
    }
    assert got == dir_bytes(tmp_path / "ref")


@pytest.mark.full
def test_two_node_cluster_with_relative_paths(
    tree: Path, reference: Path, tmp_path: Path, cluster
) -> None:
    """Relative SRC/DEST resolve against the caller's folder (the nodes were started elsewhere);
    tasks run on both nodes; the bytes equal the local engine's."""
    work = tmp_path / "caller"
    work.mkdir()
    os.symlink(tree, work / "images")
    args = ["pack", "images", "shards", *PACK_OPTS, "--engine", "ray", "--json"]
    summary = json.loads(run_cli(*args, "--ray-address", cluster.address, cwd=work).stdout)
    assert dir_bytes(work / "shards") == dir_bytes(reference)
    per_node = summary["shards_per_node"]
    assert len(per_node) == 2 and sum(per_node.values()) == SHARDS, per_node
    assert all(node.startswith("127.0.0.1/") for node in per_node)
    assert summary["workers"] == 2  # the cluster's CPUs


@pytest.mark.full
def test_driver_killed_then_rerun_reuses_shards(
    tree: Path, reference: Path, tmp_path: Path, cluster
) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "wdstool", "pack", str(tree), str(out), *PACK_OPTS, "-q"]
    cmd += ["--engine", "ray", "--ray-address", cluster.address]
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
    # a shard is complete once its marker is written (after the tar is renamed into place): a
    # kill between the two leaves a tar the rerun rightly writes again, so count markers
    markers = out / STATE_DIR
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if markers.is_dir() and len(list(markers.glob("*.tar.json"))) >= 3:
            proc.kill()
            break
        time.sleep(0.01)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the pack finished before the kill"
    assert not (out / "index.json").exists()
    complete = len(list(markers.glob("*.tar.json")))
    args = ["pack", str(tree), str(out), *PACK_OPTS, "--engine", "ray", "--json"]
    summary = json.loads(run_cli(*args, "--ray-address", cluster.address).stdout)
    assert summary["reused_shards"] >= complete >= 3
    assert summary["reused_shards"] + summary["written_shards"] == SHARDS
    assert dir_bytes(out) == dir_bytes(reference)


@pytest.mark.full
def test_killed_ray_worker_is_retried_and_output_is_identical(
    tree: Path, reference: Path, tmp_path: Path, cluster
) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "wdstool", "pack", str(tree), str(out), *PACK_OPTS]
    cmd += ["--engine", "ray", "--ray-address", cluster.address, "--json"]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and proc.poll() is None and time.monotonic() < deadline:
        for pid, cmdline in ray_processes().items():
            if "_run_task" in cmdline:
                os.kill(pid, signal.SIGKILL)
                killed = cmdline
                break
        else:
            time.sleep(0.005)
    stdout, stderr = proc.communicate(timeout=300)
    assert killed is not None, "no shard task was seen running"
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["written_shards"] == SHARDS
    assert dir_bytes(out) == dir_bytes(reference)


def test_unreachable_ray_address_fails_fast_in_one_line(small_tree: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    # "fast" without a wall-clock assert: "cannot reach" comes only from the TCP probe that runs
    # before ray.init (which would retry for minutes); a hang still fails on the timeout
    r = run_cli(
        "pack",
        str(small_tree),
        str(tmp_path / "out"),
        "--engine",
        "ray",
        "--ray-address",
        f"127.0.0.1:{port}",
        check=False,
        timeout=120,
    )
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "cannot reach" in lines[0]
    assert not (tmp_path / "out" / "index.json").exists()


def test_reachability_probe_before_ray_starts() -> None:
    """The probe itself: a listening port passes, a closed one is the one-line error; Ray's
    own keywords are left to Ray."""
    import socket

    from shard_writer.ray_engine import check_reachable
    from wdstool.base.errors import ConfigError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        check_reachable(f"127.0.0.1:{port}")
        check_reachable(f"ray://127.0.0.1:{port}")
    with pytest.raises(ConfigError, match=rf"ray_address=127.0.0.1:{port}: cannot reach"):
        check_reachable(f"127.0.0.1:{port}", timeout=5)
    check_reachable("auto")
    check_reachable("local")
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        check_reachable("127.0.0.1:http")


def test_engine_ray_without_ray_names_the_extra(small_tree: Path, tmp_path: Path) -> None:
    code = "import sys; sys.modules['ray'] = None; from wdstool.cli import main; main()"
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "pack",
            str(small_tree),
            str(tmp_path / "o"),
            "--engine",
            "ray",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert r.returncode != 0
    assert r.stderr.strip() == "Error: --engine 'ray' needs Ray: pip install -e '.[ray]'"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _head(home: Path, env: dict[str, str], ray_version: str | None = None):
    """A one-node cluster started as `ray start --head --block` does, on 127.0.0.1, in a
    session of its own (ended with it); ``ray_version``: the version its head records (the
    cluster of another Ray release)."""
    port = _free_port()
    patch = f"ray.__version__ = {ray_version!r}; " if ray_version else ""
    code = (
        f"import sys, ray; {patch}from ray.scripts.scripts import main; "
        f"sys.argv = ['ray', 'start', '--head', '--block', '--node-ip-address=127.0.0.1', "
        f"'--port={port}', '--include-dashboard=false', '--num-cpus=1', "
        f"'--disable-usage-stats']; main()"
    )
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, **LOOPBACK, "HOME": str(home), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        import grpc

        deadline = time.monotonic() + 120
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId")
            while True:  # up once the GCS answers (with anything but "unavailable")
                assert proc.poll() is None and time.monotonic() < deadline, "head did not start"
                try:
                    call(b"", timeout=2)
                    break
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE:
                        break
                time.sleep(0.5)
        time.sleep(2)  # the head writes the cluster's metadata after its GCS is up
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.mark.full
def test_a_cluster_with_token_authentication_names_ray_auth_mode(
    small_tree: Path, tmp_path: Path
) -> None:
    """Ray's own attempt retries for ~20 s and ends in "Failed to connect to Ray cluster"; one
    call to the GCS with the driver's token says which of three it is, in one line."""
    from shard_writer.ray_engine import check_authenticated

    home = tmp_path / "home"  # no ~/.ray/auth_token of this machine's
    with _head(home, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}) as address:
        args = ["pack", str(small_tree), str(tmp_path / "out"), "--engine", "ray"]
        cases = {
            "the cluster requires token authentication and this process sends no token": {},
            "RAY_AUTH_MODE=token but no token was found": {"RAY_AUTH_MODE": "token"},
            "the cluster refused the token from RAY_AUTH_TOKEN": {
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": "f" * 32,
            },
        }
        for why, extra in cases.items():
            env = {**LOOPBACK, "HOME": str(home), "RAY_AUTH_MODE": "", "RAY_AUTH_TOKEN": "",
                   **extra}  # fmt: skip
            r = run_cli(*args, "--ray-address", address, env=env, check=False, timeout=120)
            assert r.returncode != 0
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1, r.stderr
            assert lines[0].startswith(f"Error: --ray-address {address}: {why}")
            assert "export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=" in lines[0]
            assert not (tmp_path / "out" / "index.json").exists()
        token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
        with pytest.MonkeyPatch.context() as mp:
            for k, v in token.items():
                mp.setenv(k, v)
            check_authenticated(address)  # the cluster's own token passes


@pytest.mark.full
def test_a_cluster_of_another_ray_release_is_one_line_naming_both(
    small_tree: Path, tmp_path: Path
) -> None:
    with _head(tmp_path / "home", {}, ray_version="9.9.9") as address:
        r = run_cli(
            "pack", str(small_tree), str(tmp_path / "out"), "--engine", "ray",
            "--ray-address", address, env=LOOPBACK, check=False, timeout=180,
        )  # fmt: skip
    assert r.returncode != 0
    line = r.stderr.strip().splitlines()[-1]
    here = f"Ray {ray.__version__} on Python {'.'.join(map(str, sys.version_info[:3]))}"
    assert line.startswith(f"Error: --ray-address {address}: version mismatch: ")
    assert "the cluster runs Ray 9.9.9 on Python" in line and f"this process {here}" in line
    assert "pip install 'ray[default]==9.9.9'" in line


@pytest.mark.full
def test_on_error_fail_under_ray_is_the_local_one_line_error(tmp_path: Path) -> None:
    from tests.conftest import jpeg_bytes, make_tree

    src = make_tree(tmp_path / "src", {"a": 6, "b": 5}, seed=8)
    (src / "b" / "img_0002.jpg").write_bytes(jpeg_bytes(3)[:200])  # truncated
    args = ["pack", str(src), str(tmp_path / "out"), "--on-error", "fail", "--max-count", "3"]
    local = run_cli(*args, check=False)
    on_ray = run_cli(*args, "--engine", "ray", env={"RAY_ADDRESS": ""}, check=False)
    assert local.returncode == on_ray.returncode == 1
    line = [x for x in on_ray.stderr.splitlines() if x.startswith("Error:")]
    assert line == [local.stderr.strip()], on_ray.stderr
    assert "b/img_0002.jpg" in line[0]
    assert not (tmp_path / "out" / "index.json").exists()
    assert not list((tmp_path / "out").glob("*.tar"))


@pytest.mark.full
def test_node_dying_mid_pack_is_survived(
    tree: Path, reference: Path, tmp_path: Path, cluster
) -> None:
    """A third node joins, takes shard tasks, and is removed (all its processes killed) while one
    of them runs: Ray re-runs its tasks on the other nodes; the bytes are the local engine's.
    Runs last in this module: it leaves the cluster as it found it (two nodes)."""
    node = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    raylet = next(p.process.pid for p in node.all_processes["raylet"])
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "wdstool", "pack", str(tree), str(out), *PACK_OPTS, "--json"]
    cmd += ["--engine", "ray", "--ray-address", cluster.address]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    removed = False
    deadline = time.monotonic() + 120
    try:
        while not removed and proc.poll() is None and time.monotonic() < deadline:
            for pid, cmdline in ray_processes().items():
                if "_run_task" not in cmdline:
                    continue
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except OSError:
                    continue
                if ppid == raylet:  # a shard task running on the third node
                    cluster.remove_node(node, allow_graceful=False)
                    removed = True
                    break
            else:
                time.sleep(0.005)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if not removed:
            cluster.remove_node(node)
    assert removed, "no shard task was seen on the third node"
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["written_shards"] == SHARDS
    assert dir_bytes(out) == dir_bytes(reference)
