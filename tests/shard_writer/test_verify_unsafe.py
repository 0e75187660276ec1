"""verify reports every member unsafe to extract (all shards, all members), then fails, unless
--allow-unsafe-names; other problems keep stopping at the first bad shard. (One row per kind
of unsafe member is in the fault suite: tests/faults/test_unsafe_members.py.)"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from shard_writer.pack import PackOptions, pack
from shard_writer.verify import UnsafeMember, verify_dataset
from tests.conftest import run_cli
from tests.support.tars import add, sample
from tests.support.unsafe_shards import KINDS, shard_name, write_manifest, write_shard
from wdstool.base.errors import ShardError, UnsafeMembersError


def _issue_dataset(dest: Path) -> Path:
    """The issue's case: samples keyed ../KEY and /abs/KEY (they verify as good samples), a
    symlink, over three shards; the middle shard is clean."""
    dest.mkdir()

    def up(tf):
        sample(tf, "../up", 7)

    def absolute(tf):
        sample(tf, "/abs/key", 8)
        add(tf, "evil.jpg", kind=b"2", linkname="/etc/passwd")

    counts = [
        write_shard(dest / shard_name(0), ["a", "b"], [up]) + 1,
        write_shard(dest / shard_name(1), ["c", "d"]),
        write_shard(dest / shard_name(2), ["e", "f"], [absolute]) + 1,
    ]
    return write_manifest(dest, counts)


EXPECTED = [
    (0, "../up.jpg", "'..' in the path"),
    (0, "../up.cls", "'..' in the path"),
    (2, "/abs/key.jpg", "absolute name"),
    (2, "/abs/key.cls", "absolute name"),
    (2, "evil.jpg", "symlink"),
]


def test_every_unsafe_member_of_every_shard_is_reported(tmp_path: Path) -> None:
    ds = _issue_dataset(tmp_path / "ds")
    seen: list[UnsafeMember] = []
    with pytest.raises(UnsafeMembersError) as info:
        verify_dataset(str(ds), on_unsafe=seen.append)
    assert [(p.url, p.name, p.reasons) for p in seen] == [
        (str(ds / shard_name(i)), name, (why,)) for i, name, why in EXPECTED
    ]
    assert "5 member(s) in 2 of 3 shard(s) are unsafe" in info.value.message
    assert str(ds / "index.json") in info.value.message
    assert isinstance(info.value, ShardError)  # library callers catching ShardError still do
    assert info.value.report["unsafe_members"] == [p.to_json() for p in seen]
    report = verify_dataset(str(ds), allow_unsafe_names=True)
    assert report["ok"] and report["num_samples"] == 8
    assert [(m["member"], m["problems"]) for m in report["unsafe_members"]] == [
        (name, [why]) for _, name, why in EXPECTED
    ]


def test_cli_prints_one_line_per_unsafe_member_then_a_summary(tmp_path: Path) -> None:
    ds = _issue_dataset(tmp_path / "ds")
    r = run_cli("verify", str(ds), check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and r.stdout == "", r.stderr
    assert len(lines) == len(EXPECTED) + 1, r.stderr
    for line, (i, name, why) in zip(lines, EXPECTED, strict=False):
        assert line.startswith("Error: ") and str(ds / shard_name(i)) in line
        assert f"'{name}'" in line and line.endswith(why)
    assert "5 member(s) in 2 of 3 shard(s)" in lines[-1] and "--allow-unsafe-names" in lines[-1]

    r = run_cli("verify", str(ds), "--json", check=False)
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert report["ok"] is False and len(report["unsafe_members"]) == len(EXPECTED)
    assert report["unsafe_members"][4] == {
        "url": str(ds / shard_name(2)),
        "member": "evil.jpg",
        "offset": report["unsafe_members"][4]["offset"],
        "problems": ["symlink"],
    }

    r = run_cli("verify", str(ds), "--allow-unsafe-names", check=False)
    assert r.returncode == 0, r.stderr
    warnings = r.stderr.strip().splitlines()
    assert len(warnings) == len(EXPECTED) and all(w.startswith("Warning: ") for w in warnings)
    assert r.stdout.startswith("ok: 3 shards, 8 samples") and "5 unsafe" in r.stdout

    r = run_cli("verify", str(ds), "--allow-unsafe-names", "--json", check=False)
    report = json.loads(r.stdout)
    assert r.returncode == 0 and report["ok"] is True and report["allow_unsafe_names"] is True
    assert len(report["unsafe_members"]) == len(EXPECTED)


def test_other_failures_keep_stopping_at_the_first_bad_shard(tmp_path: Path) -> None:
    ds = _issue_dataset(tmp_path / "ds")
    manifest = json.loads((ds / "index.json").read_text())
    manifest["shardlist"][1]["sha256"] = "0" * 64
    (ds / "index.json").write_text(json.dumps(manifest))
    seen: list[UnsafeMember] = []
    with pytest.raises(ShardError, match=rf"{shard_name(1)}: sha256 mismatch") as info:
        verify_dataset(str(ds), on_unsafe=seen.append, allow_unsafe_names=True)
    assert not isinstance(info.value, UnsafeMembersError)
    assert [p.name for p in seen] == ["../up.jpg", "../up.cls"]  # shard 0's, found before
    r = run_cli("verify", str(ds), check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 3, r.stderr
    assert "'../up.jpg'" in lines[0] and "'../up.cls'" in lines[1]
    assert lines[2].startswith("Error: ") and "sha256 mismatch" in lines[2]


def test_a_clean_pack_has_no_unsafe_members(small_tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "ds"
    pack(str(small_tree), str(dest), PackOptions(workers=1, max_count=6))
    report = verify_dataset(str(dest))
    assert report["ok"] and report["unsafe_members"] == []


def test_unsafe_members_do_not_hide_behind_a_valid_manifest(tmp_path: Path) -> None:
    """The manifest the helpers write is valid: without the planted member verify passes."""
    ds = tmp_path / "ds"
    ds.mkdir()
    write_manifest(ds, [write_shard(ds / shard_name(0), ["a", "b"])])
    assert verify_dataset(str(ds))["ok"]
    for kind, (plant, _, fmt) in KINDS.items():
        write_manifest(ds, [write_shard(ds / shard_name(0), ["a", "b"], [plant], fmt)])
        data = (ds / shard_name(0)).read_bytes()
        entry = json.loads((ds / "index.json").read_text())["shardlist"][0]
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        with pytest.raises(UnsafeMembersError):
            verify_dataset(str(ds))
        assert verify_dataset(str(ds), allow_unsafe_names=True)["ok"], kind
