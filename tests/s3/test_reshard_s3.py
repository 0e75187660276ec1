"""reshard, split, --append and Hub parquet against a real S3 endpoint (moto's server on
loopback): the same bytes as the same work on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import dir_bytes, make_tree, run_cli
from tests.s3.test_pack_from_s3 import upload_tree
from tests.s3.test_pack_s3 import _objects
from tests.support.tar_reference import foreign_shards

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Path:
    """root/ours (our data set), root/foreign (other tools' shards), root/more (a tree)."""
    root = tmp_path_factory.mktemp("reshard-s3")
    tree = make_tree(root / "tree", {"ant": 9, "bee": 8}, seed=51)
    run_cli("pack", str(tree), str(root / "ours"), "--max-count", "5", "--workers", "1", "-q")
    foreign_shards(root / "foreign", root / "canary")
    make_tree(root / "more", {"ant": 3, "cow": 3}, seed=52)
    return root


def _cli(s3_server, *args: str) -> dict:
    env = {k: v for k, v in s3_server.env.items() if k != "AWS_ENDPOINT_URL"}
    out = run_cli(*args, "--json", "--endpoint-url", s3_server.endpoint_url, env=env)
    return json.loads(out.stdout)


@pytest.mark.full
def test_reshard_split_and_append_on_s3_match_the_same_on_disk(
    local: Path, tmp_path: Path, s3_server, s3_bucket: str
) -> None:
    ours = upload_tree(s3_server, local / "ours", s3_bucket, "src/ours")
    foreign = upload_tree(s3_server, local / "foreign", s3_bucket, "src/foreign")
    opts = ["--max-count", "6", "--workers", "1"]
    run_cli("reshard", str(local / "ours"), str(local / "foreign"), str(tmp_path / "ref"), *opts)
    got = _cli(s3_server, "reshard", ours, foreign, f"s3://{s3_bucket}/merged", *opts)
    assert got["samples"] == 17 + 15
    assert _objects(s3_server, s3_bucket, "merged") == dir_bytes(tmp_path / "ref")
    assert not (local / "canary").exists()

    run_cli("split", str(tmp_path / "ref"), str(tmp_path / "splits"), "--fractions", "a=0.5,b=0.5")
    _cli(s3_server, "split", f"s3://{s3_bucket}/merged", f"s3://{s3_bucket}/splits",
         "--fractions", "a=0.5,b=0.5")  # fmt: skip
    assert _objects(s3_server, s3_bucket, "splits") == dir_bytes(tmp_path / "splits")

    before = _objects(s3_server, s3_bucket, "merged")
    out = _cli(s3_server, "pack", str(local / "more"), f"s3://{s3_bucket}/merged", "--append")
    assert out["version"] == 2 and out["dataset_samples"] == 38
    after = _objects(s3_server, s3_bucket, "merged")
    # the shards written before are untouched; the manifest and its side files (the samples'
    # offsets) are rewritten to name the new ones too
    shards = {k for k in after if not k.startswith("index.")}
    assert all(after[k] == v for k, v in before.items() if k in shards)
    manifest = json.loads(after["index.json"])
    assert [v["version"] for v in manifest["versions"]] == [1, 2]
    assert sorted(s["url"] for s in manifest["shardlist"]) == sorted(shards)  # nothing else left
    assert set(after) - shards == {"index.json", manifest["sample_offsets"]["name"]}


def test_hub_parquet_on_s3_equals_the_local_pack(tmp_path: Path, s3_server, s3_bucket: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.conftest import jpeg_bytes

    (tmp_path / "src").mkdir()
    table = pa.table(
        {
            "image": [{"bytes": jpeg_bytes(i), "path": f"p{i}.jpg"} for i in range(9)],
            "label": ["x", "y", "z"] * 3,
        }
    )
    pq.write_table(table, tmp_path / "src" / "data.parquet", row_group_size=2)
    url = upload_tree(s3_server, tmp_path / "src", s3_bucket, "hub")
    run_cli("pack", str(tmp_path / "src" / "data.parquet"), str(tmp_path / "ref"), "--workers", "1")
    got = _cli(s3_server, "pack", f"{url}/data.parquet", str(tmp_path / "got"), "--workers", "1")
    assert got["samples"] == 9
    assert dir_bytes(tmp_path / "got") == dir_bytes(tmp_path / "ref")
