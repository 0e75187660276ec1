"""Listings and S3: a listing on S3 whose relative paths resolve against its S3 folder, a local
listing naming s3:// images, and DEST on S3 — the same bytes as the same listing on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import dir_bytes, run_cli
from tests.s3.test_pack_from_s3 import upload_tree
from tests.s3.test_pack_s3 import _objects
from tests.shard_writer.test_listing import by_row, image_rows, write_listing

pytestmark = pytest.mark.slow


@pytest.fixture
def listed(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A folder with images (some nested, one big), a listing beside them naming one missing
    image, with labels, captions and another column."""
    from tests.conftest import jpeg_bytes

    root = tmp_path / "src"
    rows = image_rows(root / "set", 12, seed=21, labels=["owl", "lark", "wren"])
    (root / "set" / "img" / "big.jpg").write_bytes(jpeg_bytes(5, size=(900, 700), quality=100))
    rows.append({"path": "img/big.jpg", "label": "owl"})
    rows.insert(3, {"path": "img/missing.jpg", "label": "owl"})
    for i, r in enumerate(rows):
        r.update(caption=f"bird {i}", source="field")
    rows[5]["path"] = "../set/" + rows[5]["path"]  # resolved against the listing's S3 folder too
    write_listing(root / "set" / "list.csv", rows)
    return root, rows


def _s3_env(s3_server) -> tuple[dict[str, str], list[str]]:
    env = {k: v for k, v in s3_server.env.items() if k != "AWS_ENDPOINT_URL"}
    return env, ["--endpoint-url", s3_server.endpoint_url]


@pytest.mark.full
def test_listing_on_s3_with_relative_paths_equals_the_local_pack(
    listed, tmp_path: Path, s3_server, s3_bucket: str
) -> None:
    root, _ = listed
    url = upload_tree(s3_server, root, s3_bucket, "raw")
    common = ["--max-count", "4", "--workers", "2", "--json"]
    ref = json.loads(
        run_cli("pack", str(root / "set" / "list.csv"), str(tmp_path / "ref"), *common).stdout
    )
    env, ep = _s3_env(s3_server)
    listing = f"{url}/set/list.csv"
    got = json.loads(run_cli("pack", listing, str(tmp_path / "got"), *common, *ep, env=env).stdout)
    assert got["samples"] == ref["samples"] == 13
    assert (
        got["skipped"]
        == ref["skipped"]
        == [{"row": 4, "path": "img/missing.jpg", "reason": "missing file"}]
    )
    assert dir_bytes(tmp_path / "got") == dir_bytes(tmp_path / "ref")
    for i, s in by_row(tmp_path / "got").items():
        assert s["txt"] == f"bird {i}".encode() and json.loads(s["json"])["source"] == "field"

    # DEST on S3 too: the same objects as the local pack, and verify reads them back
    dest = f"s3://{s3_bucket}/shards"
    run_cli("pack", listing, dest, *common, *ep, env=env)
    assert _objects(s3_server, s3_bucket, "shards") == dir_bytes(tmp_path / "ref")
    assert json.loads(run_cli("verify", dest, "--json", env=s3_server.env).stdout)["ok"]


def test_local_listing_naming_s3_images(listed, tmp_path: Path, s3_server, s3_bucket: str) -> None:
    root, rows = listed
    url = upload_tree(s3_server, root / "set" / "img", s3_bucket, "pics")
    for r in rows:
        r["path"] = f"{url}/{r['path'].rsplit('img/', 1)[1]}"
    listing = write_listing(tmp_path / "remote.jsonl", rows)
    env, ep = _s3_env(s3_server)
    r = run_cli(
        "pack", str(listing), str(tmp_path / "out"), "--workers", "1", "--json", *ep, env=env
    )
    summary = json.loads(r.stdout)
    assert summary["samples"] == 13
    assert summary["skipped"] == [
        {"row": 4, "path": f"{url}/missing.jpg", "reason": "missing file"}
    ]
    names = sorted({"owl", "lark", "wren"})
    for i, s in by_row(tmp_path / "out").items():
        assert int(s["cls"]) == names.index(rows[i]["label"])
        assert json.loads(s["json"])["path"] == rows[i]["path"]


def test_missing_listing_on_s3_is_one_line(s3_server, s3_bucket: str, tmp_path: Path) -> None:
    env, ep = _s3_env(s3_server)
    listing = f"s3://{s3_bucket}/nope/list.csv"
    r = run_cli("pack", listing, str(tmp_path / "o"), *ep, env=env, check=False)
    assert r.returncode == 1 and r.stderr.strip() == f"Error: {listing}: no such listing file"
    s3_server.client().put_object(Bucket=s3_bucket, Key="lists/l.xyz", Body=b"path\na.jpg\n")
    odd = f"s3://{s3_bucket}/lists/l.xyz"
    r = run_cli("pack", odd, str(tmp_path / "o"), *ep, env=env, check=False)
    assert r.returncode == 1 and r.stderr.strip() == (
        f"Error: {odd}: unknown listing format '.xyz' (use .csv, .tsv, .json, .jsonl or .parquet)"
    )
