"""Members unsafe to extract with ``tar -x``, through ``wdstool verify``: one row per kind.

Each shard set is otherwise valid (manifest sizes, sha256 and counts match), so the planted
member is the only thing verify can object to: it fails with one line naming the shard and the
member (plus the summary), and passes with one warning line under --allow-unsafe-names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.unsafe_shards import KINDS, dataset_with, shard_name


@pytest.mark.parametrize("kind", list(KINDS))
def test_verify_refuses_members_unsafe_to_extract(tmp_path: Path, kind: str, record) -> None:
    ds = dataset_with(tmp_path / "ds", kind)
    shard, member = str(ds / shard_name(1)), f"'{KINDS[kind][1]}'"
    rec = record(f"member unsafe to extract, {kind}: verify")

    r = run_cli("verify", str(ds), check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and "ok:" not in r.stdout, r.stderr
    naming = [line for line in lines if member in line]
    assert len(naming) == 1 and len(lines) == 2, r.stderr  # the member's line, then the summary
    assert naming[0].startswith("Error: ") and shard in naming[0]
    assert "unsafe" in lines[1] and str(ds / "index.json") in lines[1]
    rec.clear_error(naming[0], (shard,))

    r = run_cli("verify", str(ds), "--allow-unsafe-names", check=False)
    assert r.returncode == 0, r.stderr
    warning = r.stderr.strip()
    assert warning.startswith("Warning: ") and shard in warning and member in warning
    assert "\n" not in warning and r.stdout.startswith("ok: 2 shards, 6 samples")
