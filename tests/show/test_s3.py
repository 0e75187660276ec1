"""``wdstool show`` on S3 (moto on loopback, behind a counting proxy): it downloads the manifest
and little more than the samples it shows, and shows the same samples as from a local copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.show.conftest import Truth, spans
from tests.support.countproxy import CountingProxy
from wdstool.show import ShowConfig, build_report

pytestmark = pytest.mark.slow


def test_show_on_s3_reads_at_most_twice_what_it_shows(
    hostile_dataset: Truth, s3_server, s3_bucket: str, tmp_path: Path
) -> None:
    client = s3_server.client()
    for f in sorted(hostile_dataset.root.iterdir()):
        client.put_object(Bucket=s3_bucket, Key=f"set/{f.name}", Body=f.read_bytes())
    config = ShowConfig(samples=12, seed=3, epochs=1, image_size=32)
    local = build_report(str(hostile_dataset.root), config)
    with CountingProxy(s3_server.endpoint_url) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.endpoint_url}
        remote = build_report(
            f"s3://{s3_bucket}/set", config, out_dir=str(tmp_path / "r"), storage_options=options
        )
        downloaded = proxy.bytes_sent()
        gets = proxy.gets()
    keys = [(s["shard"], s["key"]) for s in remote["samples"]]
    assert keys == [(s["shard"], s["key"]) for s in local["samples"]]
    assert len(keys) == 12
    where = {n: spans(hostile_dataset.root / n) for n in {s for s, _ in keys}}
    shown = sum(where[s][k][1] - where[s][k][0] for s, k in keys)
    manifest = (hostile_dataset.root / "index.json").stat().st_size
    assert downloaded == remote["reads"]["bytes"]  # the report's own count is honest
    assert downloaded <= 2 * (shown + manifest), (downloaded, shown, manifest)
    assert gets[f"/{s3_bucket}/set/index.json"] == 1
    assert (tmp_path / "r" / "index.html").is_file()
