"""`wdstool reshard`: our data sets and other tools' shards merged into one data set with new
limits; every member carried byte for byte (tarfile is the reference), keys, collisions, key
lists, dedupe, bad inputs, determinism whatever --workers."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from shard_writer.options import ReshardOptions
from shard_writer.reshard import reshard
from tests.conftest import dir_bytes, make_tree, run_cli
from tests.support.tar_reference import dataset_samples, foreign_shards, read_samples
from wdstool.base.errors import InputError


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(our data set of 30 samples in 7 shards, a folder of 3 foreign shards, the canary path
    their .pyd members would create if unpickled)."""
    root = tmp_path_factory.mktemp("reshard")
    tree = make_tree(root / "tree", {"ant": 12, "bee": 10, "cow": 8}, seed=4)
    ours = root / "ours"
    run_cli("pack", str(tree), str(ours), "--max-count", "5", "--workers", "1", "-q")
    canary = root / "canary"
    return ours, foreign_shards(root / "foreign", canary), canary


def _foreign(folder: Path) -> list:
    return read_samples(sorted(folder.glob("*.tar")))


def _opts(**kw) -> ReshardOptions:
    return ReshardOptions(**{"workers": 1, "sync": False, **kw})


def test_merge_carries_every_member_in_source_order(sources, tmp_path: Path) -> None:
    ours, foreign, canary = sources
    dest = tmp_path / "merged"
    summary = reshard([str(ours), str(foreign)], str(dest), _opts(max_count=8, shuffle=False))
    expected = dataset_samples(ours) + _foreign(foreign)
    assert dataset_samples(dest) == expected  # keys, members, their order and bytes
    m = json.loads((dest / "index.json").read_text())
    assert summary.samples == m["num_samples"] == len(expected) == 45
    assert [e["nsamples"] for e in m["shardlist"]] == [8] * 5 + [5]
    assert m["classes"] == ["ant", "bee", "cow"]  # ours; the foreign shards have no manifest
    assert not canary.exists()  # .pyd members were carried as bytes, never unpickled
    split = dict(dataset_samples(dest))["split_7"]  # joined across the two source shards
    assert [s for s, _ in split] == [".png", ".cls", ".seg.pyd"]
    verified = json.loads(run_cli("verify", str(dest), "--json").stdout)
    assert verified["ok"] and verified["num_samples"] == 45


def test_shuffled_output_is_the_same_samples_and_independent_of_workers(
    sources, tmp_path: Path
) -> None:
    ours, foreign, _ = sources
    args = [str(ours), str(foreign), "--max-count", "6", "--seed", "3", "-q"]
    run_cli("reshard", *args[:2], str(tmp_path / "w1"), *args[2:], "--workers", "1")
    run_cli("reshard", *args[:2], str(tmp_path / "w2"), *args[2:], "--workers", "2")
    assert dir_bytes(tmp_path / "w1") == dir_bytes(tmp_path / "w2")
    got = dataset_samples(tmp_path / "w1")
    want = dataset_samples(ours) + _foreign(foreign)
    assert got != want  # shuffled across shards ...
    assert sorted(got, key=repr) == sorted(want, key=repr)  # ... samples untouched


def test_collisions_are_an_error_naming_both_shards_or_renamed(sources, tmp_path: Path) -> None:
    ours, _, _ = sources
    r = run_cli("reshard", str(ours), str(ours), str(tmp_path / "twice"), check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "is in both" in r.stderr and r.stderr.count("train-000000.tar") == 2
    assert not (tmp_path / "twice" / "index.json").exists()
    dest = tmp_path / "renamed"
    summary = reshard([str(ours), str(ours)], str(dest), _opts(rename_collisions=True))
    keys = [k for k, _ in dataset_samples(dest)]
    assert len(keys) == len(set(keys)) == 60 and summary.extra["renamed"] == 30
    assert sum(k.endswith("_1") for k in keys) == 30


def test_keys_and_exclude_keys_select_samples(sources, tmp_path: Path) -> None:
    ours, foreign, _ = sources
    samples = dataset_samples(ours) + _foreign(foreign)
    chosen = [samples[i][0] for i in (0, 7, 31, 40)]
    (tmp_path / "keys.txt").write_text("\n".join(chosen) + "\n\n")
    dest = tmp_path / "subset"
    reshard([str(ours), str(foreign)], str(dest), _opts(keys=str(tmp_path / "keys.txt")))
    assert sorted(dataset_samples(dest)) == sorted(s for s in samples if s[0] in chosen)
    dest = tmp_path / "rest"
    reshard([str(ours), str(foreign)], str(dest), _opts(exclude_keys=str(tmp_path / "keys.txt")))
    assert Counter(k for k, _ in dataset_samples(dest)) == Counter(
        k for k, _ in samples if k not in chosen
    )
    (tmp_path / "bad.txt").write_text(f"{chosen[0]}\nno_such_key\n")
    r = run_cli(
        "reshard", str(ours), str(tmp_path / "x"), "--keys", str(tmp_path / "bad.txt"), check=False
    )
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "1 key(s) of --keys name no sample" in r.stderr and "'no_such_key'" in r.stderr
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").glob("*.tar"))


def test_dedupe_keeps_the_first_and_lists_the_others(sources, tmp_path: Path) -> None:
    ours, _, _ = sources
    copy = tmp_path / "copy"  # the same images under other keys: a tar of renamed members
    copy.mkdir()
    with tarfile.open(copy / "dup.tar", "w") as tf:
        for key, members in dataset_samples(ours)[:4]:
            for suffix, data in members:
                info = tarfile.TarInfo(f"again_{key}{suffix}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    dest = tmp_path / "deduped"
    summary = reshard([str(ours), str(copy)], str(dest), _opts(dedupe=True))
    assert summary.samples == 30 and summary.extra["duplicates"] == 4
    skipped = json.loads((dest / "index.json").read_text())["skipped"]
    assert sorted(s["key"] for s in skipped) == sorted(
        f"again_{k}" for k, _ in dataset_samples(ours)[:4]
    )
    assert all("duplicate image of" in s["reason"] for s in skipped)


def test_a_damaged_shard_is_a_one_line_error_or_skipped(sources, tmp_path: Path) -> None:
    ours, _, _ = sources
    bad = tmp_path / "bad"
    shutil.copytree(ours, bad)
    shard = bad / "train-000002.tar"
    with tarfile.open(shard) as tf:
        at = tf.getmembers()[7].offset  # a header further in: the samples before it read fine
    data = bytearray(shard.read_bytes())
    data[at + 100] ^= 0xFF
    shard.write_bytes(bytes(data))
    dest = tmp_path / "out"
    r = run_cli("reshard", str(bad), str(dest), check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "train-000002.tar" in r.stderr and "checksum" in r.stderr
    assert not dest.exists() or not [p for p in dest.iterdir() if not p.name.startswith(".")]
    out = json.loads(run_cli("reshard", str(bad), str(dest), "--on-error", "skip", "--json").stdout)
    assert [s["path"] for s in out["skipped"]] == [str(shard)]
    assert 25 < out["samples"] < 30  # the damaged shard's samples before the damage are kept
    missing = run_cli("reshard", str(tmp_path / "nothing"), str(dest), check=False)
    assert missing.returncode == 1 and "neither a data set" in missing.stderr


def test_max_side_reencodes_the_image_only(sources, tmp_path: Path) -> None:
    _, foreign, _ = sources
    dest = tmp_path / "small"
    reshard([str(foreign)], str(dest), _opts(max_side=16, shuffle=False))
    before, after = _foreign(foreign), dataset_samples(dest)
    assert [k for k, _ in before] == [k for k, _ in after]
    for (_, old), (_, new) in zip(before, after, strict=True):
        old_map, new_map = dict(old), dict(new)
        image = next(s for s in (".jpg", ".png") if s in old_map)
        others = [s for s, _ in old if s != image]
        assert [(s, old_map[s]) for s in others] == [(s, new_map[s]) for s in others]
        assert ".jpg" in new_map and new_map[".jpg"][:2] == b"\xff\xd8"
        from PIL import Image

        assert max(Image.open(io.BytesIO(new_map[".jpg"])).size) <= 16


def test_classes_that_disagree_cannot_be_merged(sources, tmp_path: Path) -> None:
    ours, _, _ = sources
    other = tmp_path / "other"
    tree = make_tree(tmp_path / "t2", {"zebra": 2, "ant": 2}, seed=9)
    run_cli("pack", str(tree), str(other), "--workers", "1", "-q")
    with pytest.raises(InputError, match="different classes"):
        reshard([str(ours), str(other)], str(tmp_path / "x"), _opts())


def test_dest_holding_a_source_is_refused_even_with_overwrite(sources) -> None:
    ours, _, _ = sources
    before = {p.name: p.read_bytes() for p in ours.iterdir()}
    r = run_cli("reshard", str(ours), str(ours), "--overwrite", check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "holds shards of SRC" in r.stderr
    assert {p.name: p.read_bytes() for p in ours.iterdir()} == before
