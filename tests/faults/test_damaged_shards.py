"""Damaged shards under on_error="skip": the epoch goes on with equal, full, exact batch counts.

A shard cut short (inside a tar header, inside a member, exactly between samples), missing, empty
or unreadable after the retries: the planned samples that cannot be read are replaced like bad
images (counted, logged once per shard with the URL and byte offset, summed in a warning at the
end of the epoch), no other rank or worker reads anything different, and a resume still gives
the uninterrupted run's samples wherever the data was readable. ``max_replaced`` bounds it.
"""

from __future__ import annotations

import json
import logging
import shutil
import tarfile
import uuid
from pathlib import Path

import pytest

from loaders import RetryPolicy, make_loader
from shard_writer.pack import PackOptions, pack
from tests.conftest import make_tree
from tests.support.faultproxy import FaultProxy
from wdstool.base.errors import ShardError, WdsToolError

BATCH = 4
SHARD = "train-000001.tar"


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("damaged")
    src = make_tree(root / "src", {"a": 10, "b": 10, "c": 10}, seed=29)
    dest = root / "shards"
    pack(str(src), str(dest), PackOptions(workers=1, max_count=10))
    return dest


def _samples(shard: Path) -> list[tuple[str, int, int]]:
    """(key, header offset of its first member, end of its last member's data) per sample."""
    out: dict[str, list[int]] = {}
    with tarfile.open(shard) as tf:
        for m in tf.getmembers():
            key = m.name.split(".", 1)[0]
            span = out.setdefault(key, [m.offset, 0])
            span[1] = m.offset_data + m.size
    return [(k, a, b) for k, (a, b) in out.items()]


def damage(ds: Path, kind: str) -> tuple[int, list[str]]:
    """Damage SHARD in ``ds``; return (samples of it that are still readable, their keys)."""
    shard = ds / SHARD
    samples = _samples(shard)
    data = shard.read_bytes()
    if kind == "missing":
        shard.unlink()
        return 0, []
    if kind == "empty":
        shard.write_bytes(b"")
        return 0, []
    with tarfile.open(shard) as tf:
        members = tf.getmembers()
    if kind == "cut inside a tar header":
        cut, keep = members[13].offset + 100, 4  # the 2nd member of sample 4
    elif kind == "cut inside a member":
        m = members[18]  # the image of sample 6
        cut, keep = m.offset_data + m.size // 2, 6
    elif kind == "cut between samples":
        cut, keep = samples[7][1], 7  # exactly where sample 7's first header starts
        assert cut % 512 == 0
    else:
        raise AssertionError(kind)
    shard.write_bytes(data[:cut])
    return keep, [k for k, _a, _b in samples[:keep]]


def rank_epoch(ds, rank: int, world: int = 2, **kw) -> tuple[list[list[str]], int, int, object]:
    kw.setdefault("num_workers", 2)
    kw.setdefault("max_replaced", None)  # a third of the epoch is damaged here, on purpose
    loader = make_loader(
        str(ds),
        BATCH,
        image_size=16,
        seed=3,
        rank=rank,
        world_size=world,
        on_error="skip",
        **kw,
    )
    batches = [list(b["keys"]) for b in loader]
    return batches, len(loader), loader.num_replaced, loader


KINDS = [
    "cut inside a tar header",
    "cut inside a member",
    "cut between samples",
    "missing",
    "empty",
]


@pytest.mark.parametrize("kind", KINDS)
def test_skip_keeps_every_rank_going(packed: Path, tmp_path: Path, kind: str, record, caplog):
    ds = tmp_path / "ds"
    shutil.copytree(packed, ds)
    readable, readable_keys = damage(ds, kind)
    caplog.set_level(logging.WARNING)
    reference = [rank_epoch(packed, r)[0] for r in range(2)]
    got = [rank_epoch(ds, r) for r in range(2)]
    lost = 10 - readable
    replaced = sum(n for _, _, n, _ in got)
    for (batches, length, _n, _l), ref in zip(got, reference, strict=True):
        assert len(batches) == length == len(ref)  # same batch count as an undamaged epoch
        assert [len(b) for b in batches] == [len(b) for b in ref]  # full batches, exact sizes
    assert replaced == lost  # 30 samples on 2 ranks: no padding, so exactly the unreadable ones
    delivered = {k for batches, *_ in got for b in batches for k in b}
    everything = {k for ref in reference for b in ref for k in b}
    unreadable = everything - delivered
    assert len(unreadable) == lost and not set(readable_keys) & unreadable
    ends = [r.getMessage() for r in caplog.records if "unreadable samples" in r.getMessage()]
    assert ends and all(SHARD in m for m in ends)  # per rank that replaced, naming the shard
    caplog.clear()  # the workers log in their own processes: once more in this one, to see it
    rank_epoch(ds, 0, world=1, num_workers=0)
    messages = [r.getMessage() for r in caplog.records if "damaged shard" in r.getMessage()]
    assert len(messages) == 1 and SHARD in messages[0] and "up to byte" in messages[0]
    record(f"shard {kind} (skip, 2 ranks)").recovered()


def test_resume_after_a_damaged_epoch_gives_the_readable_samples_again(
    packed: Path, tmp_path: Path
) -> None:
    ds = tmp_path / "ds"
    shutil.copytree(packed, ds)
    damage(ds, "cut inside a member")
    full, _, _, _ = rank_epoch(ds, 0)
    first = make_loader(str(ds), BATCH, image_size=16, num_workers=2, seed=3, rank=0,
                        world_size=2, on_error="skip", max_replaced=None)  # fmt: skip
    it = iter(first)
    head = [list(next(it)["keys"]) for _ in range(2)]
    state = json.loads(json.dumps(first.state_dict()))
    del it
    rest = make_loader(str(ds), BATCH, image_size=16, num_workers=2, seed=3, rank=0,
                       world_size=2, on_error="skip", max_replaced=None)  # fmt: skip
    rest.load_state_dict(state)
    stitched = head + [list(b["keys"]) for b in rest]
    assert [len(b) for b in stitched] == [len(b) for b in full]
    flat_full = [k for b in full for k in b]
    flat = [k for b in stitched for k in b]

    def first_seen(keys: list[str]) -> dict[str, int]:
        seen: dict[str, int] = {}
        for i, k in enumerate(keys):
            seen.setdefault(k, i)
        return seen

    assert first_seen(flat) == first_seen(flat_full)  # readable samples: same places


@pytest.mark.parametrize("limit", [3, 0.05])
def test_max_replaced_stops_with_one_line_naming_the_shard(
    packed: Path, tmp_path: Path, limit, record
) -> None:
    ds = tmp_path / "ds"
    shutil.copytree(packed, ds)
    damage(ds, "missing")
    with pytest.raises(ShardError) as err:
        for r in range(2):
            rank_epoch(ds, r, max_replaced=limit)
    msg = err.value.message
    assert "over max_replaced=" in msg and SHARD in msg and "replaced in epoch 0" in msg
    record("damaged shard over the max_replaced budget").clear_error(msg, SHARD)


def test_under_raise_nothing_changes(packed: Path, tmp_path: Path, record) -> None:
    ds = tmp_path / "ds"
    shutil.copytree(packed, ds)
    damage(ds, "cut inside a member")
    loader = make_loader(str(ds), BATCH, image_size=16, num_workers=0, seed=3)
    with pytest.raises(WdsToolError) as err:
        list(loader)
    assert SHARD in err.value.message and "\n" not in err.value.message


def test_s3_shard_unreadable_after_all_retries(
    packed: Path, tmp_path: Path, s3_server, record
) -> None:
    """Every request for one source's shards fails (500, through a proxy): after the retries
    its planned samples are replaced; the other source's samples all come."""
    from loaders import Source

    bucket = f"d-{uuid.uuid4().hex[:12]}"
    s3_server.make_bucket(bucket)
    url = f"s3://{bucket}/ds"
    src = packed.parent / "src"
    options = s3_server.storage_options
    pack(str(src), url, PackOptions(workers=1, max_count=10), storage_options=options)
    # a local manifest naming the S3 shards by absolute URL: only shard reads meet the proxy
    manifest = json.loads((packed / "index.json").read_text())
    for entry in manifest["shardlist"]:
        entry["url"] = f"{url}/{entry['url']}"
    (tmp_path / "remote").mkdir()
    (tmp_path / "remote" / "index.json").write_text(json.dumps(manifest))
    with FaultProxy(s3_server.port, ["500"], cycle=True) as proxy:
        failing = {**options, "endpoint_url": f"http://127.0.0.1:{proxy.port}"}
        loader = make_loader(
            [Source(packed, weight=2), Source(tmp_path / "remote", storage_options=failing)],
            BATCH,
            image_size=16,
            num_workers=0,
            on_error="skip",
            max_replaced=None,
            retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02, patience=0.0),
        )
        batches = list(loader)
        assert proxy.injected["500"] > 0
    assert len(batches) == len(loader)
    assert sum(len(b["keys"]) for b in batches) == 60  # the epoch: both sources' sizes
    # weights 2:1 of 60: source 0 gives 40 (its 30 samples, 10 of them twice), source 1 gives
    # 20, none readable: each is replaced by a sample of source 0 (and says so in "source")
    assert loader.num_replaced == 20 and sum(loader.replaced_from.values()) == 20
    assert set(loader.replaced_from) <= {e["url"] for e in manifest["shardlist"]}
    sources = [int(x) for b in batches for x in b["source"]]
    assert sources == [0] * 60
    good = [k for b in batches for k in b["keys"]]
    assert len(set(good)) == 30  # nothing of the healthy source lost
    record("S3 shard unreadable after all retries (skip)").recovered()


@pytest.mark.slow
def test_torchrun_job_with_damaged_shards_under_skip(packed: Path, tmp_path: Path, record) -> None:
    """A real 2-rank job (examples/train_ddp.py, gloo): one shard cut inside a member, another
    missing; both ranks take the same steps and finish the epochs."""
    from tests.support.torchrun import torchrun

    ds = tmp_path / "ds"
    shutil.copytree(packed, ds)
    damage(ds, "cut inside a member")
    (ds / "train-000002.tar").unlink()
    out = tmp_path / "report"
    args = ["--data", str(ds), "--device", "cpu", "--epochs", "2", "--batch-size", str(BATCH)]
    args += ["--image-size", "32", "--workers", "1", "--on-error", "skip", "--out", str(out)]
    args += ["--max-replaced", "none"]  # two of the three shards are damaged, on purpose
    args += ["--keep-last"]  # every planned sample read, the unreadable ones counted
    torchrun(2, *args)
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    for e in range(2):
        assert {r["epochs"][e]["steps"] for r in reports} == {reports[0]["len"]}
        # the report's count is cumulative: 4 + 10 unreadable samples per epoch
        assert sum(r["epochs"][e]["replaced"] for r in reports) == (e + 1) * (4 + 10)
    record("DDP job, a shard cut short and one missing (skip)").recovered()
