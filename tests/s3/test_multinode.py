"""Two simulated nodes (two torchrun agents, c10d rendezvous on 127.0.0.1), 2 ranks each,
training 2 epochs from S3 with a shard cache per node: equal steps, exact epoch cover, and
each shard downloaded at most once per node over the whole run (GETs counted at a proxy per
node), so the second epoch comes from the node's cache."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from shard_writer.pack import PackOptions, pack
from tests.conftest import REPO, make_tree
from tests.support.countproxy import CountingProxy
from tests.support.torchrun import free_port, torchrun_env

pytestmark = [pytest.mark.slow, pytest.mark.full]
NODES, PER_NODE = 2, 2


def agent_cmd(port: int, data: str, cache: Path, out: Path) -> list[str]:
    """One simulated node: a torchrun agent; c10d assigns the ranks."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={NODES}",
        f"--nproc_per_node={PER_NODE}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=wdstool-multinode",
        "--local-addr=127.0.0.1",
        str(REPO / "examples" / "train_ddp.py"),
        *("--data", data, "--device", "cpu", "--epochs", "2", "--batch-size", "4"),
        *("--image-size", "32", "--workers", "1", "--log-every", "1000"),
        *("--cache-dir", str(cache), "--out", str(out)),
    ]


def test_two_nodes_over_s3_download_each_shard_once_per_node(
    tmp_path: Path, s3_server, s3_bucket
) -> None:
    src = make_tree(tmp_path / "src", {"a": 18, "b": 16, "c": 14}, seed=4)
    url = f"s3://{s3_bucket}/ds"
    pack(
        str(src),
        url,
        PackOptions(workers=1, max_count=5),
        storage_options=s3_server.storage_options,
    )
    index = json.loads(
        s3_server.client().get_object(Bucket=s3_bucket, Key="ds/index.json")["Body"].read()
    )
    shards = [s["url"] for s in index["shardlist"]]
    total = sum(s["nsamples"] for s in index["shardlist"])
    assert len(shards) == 10 and total == 48  # 12 per rank: 3 full batches

    port = free_port()
    procs = []
    with contextlib.ExitStack() as stack:
        proxies = [stack.enter_context(CountingProxy(s3_server.endpoint_url)) for _ in range(NODES)]
        stack.callback(lambda: [p.kill() for p in procs if p.poll() is None])
        for node, proxy in enumerate(proxies):
            env = {**torchrun_env(), **s3_server.env, "AWS_ENDPOINT_URL": proxy.endpoint_url}
            cmd = agent_cmd(port, url, tmp_path / f"node{node}" / "cache", tmp_path / "out")
            procs.append(
                subprocess.Popen(
                    cmd,
                    cwd=REPO,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outputs = [p.communicate(timeout=400)[0] for p in procs]
        for p, output in zip(procs, outputs, strict=True):
            assert p.returncode == 0, output[-3000:]

    world = NODES * PER_NODE
    reports = [json.loads((tmp_path / "out" / f"rank{r}.json").read_text()) for r in range(world)]
    assert {r["world_size"] for r in reports} == {world}
    for epoch in range(2):
        steps = {r["epochs"][epoch]["steps"] for r in reports}
        assert steps == {reports[0]["len"]}, steps
        covered = [k for r in reports for k in r["epochs"][epoch]["keys"]]
        assert len(set(covered)) == total
        assert len(covered) - total <= world - 1
    for node, proxy in enumerate(proxies):
        gets = proxy.gets(".tar")
        assert gets, f"node {node} downloaded nothing"
        assert max(gets.values()) == 1, f"node {node}: {gets}"
        cached = sorted(
            p.name.split(".")[0] for p in (tmp_path / f"node{node}" / "cache").rglob("*.tar.*")
        )
        assert cached == sorted(Path(k).name.split(".")[0] for k in gets)
