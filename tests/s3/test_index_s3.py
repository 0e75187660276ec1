"""`wdstool index --dali` on a dataset in S3 (moto's server on loopback): index objects next
to the shards, or local files under --out (DALI opens index files locally)."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from tests.conftest import make_tree, run_cli
from tests.support.dali_idx import check_index_against_tar


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return make_tree(tmp_path_factory.mktemp("idxsrc") / "src", {"a": 9, "b": 8, "c": 6}, seed=3)


@pytest.fixture
def s3_dataset(tree: Path, s3_server, s3_bucket: str) -> str:
    url = f"s3://{s3_bucket}/sets/v1"
    run_cli("pack", str(tree), url, "--max-count", "8", "--workers", "1", "-q", env=s3_server.env)
    return url


def fs_of(s3_server):
    return fsspec.filesystem("s3", **s3_server.storage_options, skip_instance_cache=True)


def test_index_objects_next_to_shards_on_s3(s3_dataset: str, s3_server, tmp_path: Path) -> None:
    fs = fs_of(s3_server)
    prefix = s3_dataset.removeprefix("s3://")
    manifest = json.loads(fs.cat_file(f"{prefix}/index.json"))
    r = run_cli("index", s3_dataset, "--dali", "--json", env=s3_server.env)
    summary = json.loads(r.stdout)
    assert summary["num_samples"] == 23 and summary["num_shards"] == 3
    assert summary["num_members"] == 3 * 23
    names = [e["url"].replace(".tar", ".idx") for e in manifest["shardlist"]]
    assert summary["index_files"] == [f"{s3_dataset}/{n}" for n in names]
    fs.invalidate_cache()
    listed = sorted(p.rsplit("/", 1)[1] for p in fs.find(prefix))
    shards = [e["url"] for e in manifest["shardlist"]]
    assert listed == sorted(["index.json", "index.offsets.npy", *shards, *names])
    for e, name in zip(manifest["shardlist"], names, strict=True):
        tar = fs.cat_file(f"{prefix}/{e['url']}")
        text = fs.cat_file(f"{prefix}/{name}").decode()
        samples = check_index_against_tar(text, tar)
        assert len(samples) == e["nsamples"]
        assert all([c.ext for c in s] == ["jpg", "cls", "json"] for s in samples)

    # --out: local files, the same bytes (the form DALI can open)
    out = tmp_path / "idx"
    run_cli(
        "index",
        f"{s3_dataset}/index.json",
        "--dali",
        "--out",
        str(out),
        "-q",
        "--endpoint-url",
        s3_server.endpoint_url,
        env={k: v for k, v in s3_server.env.items() if k != "AWS_ENDPOINT_URL"},
    )
    for name in names:
        assert (out / name).read_bytes() == fs.cat_file(f"{prefix}/{name}")


def test_missing_and_changed_shards_on_s3_are_named(s3_dataset: str, s3_server) -> None:
    fs = fs_of(s3_server)
    prefix = s3_dataset.removeprefix("s3://")
    shard = f"{prefix}/train-000001.tar"
    data = fs.cat_file(shard)
    fs.pipe_file(shard, data[:-1024])  # the end-of-archive blocks gone: the size disagrees
    r = run_cli("index", s3_dataset, "--dali", env=s3_server.env, check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert f"s3://{shard}:" in r.stderr and "the manifest says" in r.stderr
    fs.rm(shard)
    r = run_cli("index", s3_dataset, "--dali", env=s3_server.env, check=False)
    assert r.returncode == 1
    assert r.stderr.strip() == f"Error: s3://{shard}: shard listed in the manifest is missing"
    fs.invalidate_cache()
    assert not fs.exists(f"{prefix}/train-000001.idx")
    r = run_cli("index", f"s3://{prefix}/nope", "--dali", env=s3_server.env, check=False)
    assert r.returncode == 1 and "nope/index.json: no manifest found" in r.stderr
