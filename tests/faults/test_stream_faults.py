"""Streaming under faults: random S3 faults, a killed DataLoader worker, a bad shard under DDP,
fuzzed tar and manifest input, and credentials that must never show."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import tarfile
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loaders import RetryPolicy, make_loader
from shard_writer.pack import PackOptions, pack
from tests.conftest import make_tree, run_cli
from tests.faults.conftest import Recorder, runs
from tests.support.faultproxy import FaultProxy
from wdstool.base.errors import ShardError
from wdstool.format.manifest import parse_manifest
from wdstool.format.tar_read import TarSampleReader


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return make_tree(tmp_path_factory.mktemp("sf") / "src", {"a": 16, "b": 15, "c": 14}, seed=77)


@pytest.fixture(scope="module")
def s3_dataset(tree: Path, s3_server) -> str:
    bucket = f"f-{uuid.uuid4().hex[:12]}"
    s3_server.make_bucket(bucket)
    url = f"s3://{bucket}/ds"
    pack(
        str(tree),
        url,
        PackOptions(workers=1, max_count=12),
        storage_options=s3_server.storage_options,
    )
    return url


def _epoch_keys(loader) -> list[str]:
    return [k for b in loader for k in b["keys"]]


def test_random_s3_faults_lose_and_repeat_nothing(s3_dataset: str, s3_server, record) -> None:
    rng = random.Random(99)
    base = make_loader(
        s3_dataset,
        6,
        image_size=16,
        num_workers=2,
        seed=3,
        storage_options=s3_server.storage_options,
    )
    want = _epoch_keys(base)
    rec = record("S3 faults at random points (drop/stall/500/503/reset/cut)")
    kinds = ["ok", "ok", "503", "500", "reset", "drop", "stall"]
    for _ in range(runs(3)):
        schedule = []
        for _ in range(40):
            kind = rng.choice(kinds)
            if kind in ("drop", "stall"):
                kind = f"{kind}:{rng.randrange(200, 60_000)}"
            schedule.append(kind)
        with FaultProxy(s3_server.port, stall_s=1.5) as proxy:
            options = {
                **s3_server.storage_options,
                "endpoint_url": proxy.endpoint_url,
                "config_kwargs": {"read_timeout": 0.5, "connect_timeout": 2},
            }
            loader = make_loader(
                s3_dataset,
                6,
                image_size=16,
                num_workers=2,
                seed=3,
                storage_options=options,
                retry=RetryPolicy(attempts=12, base_delay=0.01, max_delay=0.05, patience=0.0),
            )
            proxy.set_schedule(schedule, cycle=True)
            # 12 tries in a row without progress: these schedules never exhaust them, so a
            # give-up here is a failure of the retries, not a "clear error"
            got = _epoch_keys(loader)
            injected = sum(proxy.injected.values())
        lost = sum((Counter(want) - Counter(got)).values())
        dup = sum((Counter(got) - Counter(want)).values())
        assert got == want
        assert injected >= 3, dict(proxy.injected)  # the run did meet faults
        rec.recovered(lost=lost, duplicates=dup)


@pytest.mark.timeout(120)  # a hang fails the test (pytest-timeout) instead of blocking CI
def test_killed_dataloader_worker_is_a_clear_error_not_a_hang(
    tree: Path, tmp_path: Path, record
) -> None:
    ds = tmp_path / "ds"
    pack(str(tree), str(ds), PackOptions(workers=1, max_count=12))
    loader = make_loader(ds, 2, image_size=16, num_workers=2, prefetch_factor=1, seed=0)
    rec = record("a DataLoader worker killed mid-epoch")
    # consumed in the main thread, as a training loop is: torch reports a dead worker from its
    # SIGCHLD handler or its next get(), both of which raise there
    try:
        it = iter(loader)
        next(it)
        os.kill(loader.dataloader._iterator._workers[0].pid, signal.SIGKILL)
        for _ in it:
            time.sleep(0.01)
        result = "finished"
    except RuntimeError as exc:
        result = f"{type(exc).__name__}: {exc}"
    assert "killed by signal" in result or "exited unexpectedly" in result, result
    rec.clear_error(result.splitlines()[0], ("DataLoader worker", "killed"))


@pytest.mark.slow
def test_ddp_rank_with_a_bad_shard_under_skip_takes_the_same_steps(
    tree: Path, tmp_path: Path, record
) -> None:
    from tests.support.torchrun import torchrun

    ds = tmp_path / "ds"
    pack(str(tree), str(ds), PackOptions(workers=1, max_count=12))
    shard = ds / "train-000001.tar"
    with tarfile.open(shard) as tf:
        jpgs = [m for m in tf.getmembers() if m.name.endswith(".jpg")]
    data = bytearray(shard.read_bytes())
    for m in jpgs[:3]:  # three corrupt images in one shard: whichever rank reads it
        data[m.offset_data : m.offset_data + m.size] = b"\x00" * m.size
    shard.write_bytes(bytes(data))
    out = tmp_path / "report"
    torchrun(
        2,
        "--data",
        str(ds),
        "--device",
        "cpu",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--image-size",
        "32",
        "--workers",
        "1",
        "--on-error",
        "skip",
        "--keep-last",  # every planned sample is read, the bad ones among them
        "--out",
        str(out),
    )
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert {r["epochs"][0]["steps"] for r in reports} == {reports[0]["len"]}
    # the three bad samples are replaced; padding (45 samples on 2 ranks) may repeat one of them
    assert 3 <= sum(r["epochs"][0]["replaced"] for r in reports) <= 4
    record("DDP: a rank reads a bad shard under on_error=skip").recovered()


# --- fuzzing ---------------------------------------------------------------------------------
def _valid_tar() -> bytes:
    from tests.conftest import jpeg_bytes

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for i in range(3):
            for ext, data in (("jpg", jpeg_bytes(i)), ("cls", b"1"), ("json", b"{}")):
                info = tarfile.TarInfo(f"k{i}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


_TAR = _valid_tar()


FUZZ_EXAMPLES = 300


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    edits=st.lists(st.tuples(st.integers(0, len(_TAR) - 1), st.integers(0, 255)), max_size=8),
    cut=st.integers(0, len(_TAR)),
)
def test_fuzz_mutated_tars_raise_only_shard_errors(edits, cut) -> None:
    data = bytearray(_TAR[:cut])
    for pos, value in edits:
        if pos < len(data):
            data[pos] = value
    try:
        for sample in TarSampleReader(io.BytesIO(bytes(data)), "fuzz.tar"):
            assert sum(len(v) for v in sample.parts.values()) <= len(data)
    except ShardError as exc:
        Recorder("fuzz: mutated tars (tar reader), examples").clear_error(exc.message, "fuzz.tar")
    else:
        Recorder("fuzz: mutated tars (tar reader), examples").recovered()


_MANIFEST = json.dumps(
    {
        "__kind__": "wids-shard-index-v1",
        "wids_version": 1,
        "shardlist": [{"url": "a.tar", "nsamples": 3, "filesize": 100, "sha256": "0" * 64}],
    }
)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=400),
        st.text(max_size=400).map(str.encode),
        st.lists(st.tuples(st.integers(0, len(_MANIFEST) - 1), st.characters()), max_size=6).map(
            lambda edits: _edit(_MANIFEST, edits).encode("utf-8", "surrogatepass")
        ),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
            max_leaves=20,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_fuzz_manifest_parser_raises_only_shard_errors(data: bytes) -> None:
    row = Recorder("fuzz: manifest parser, examples")
    try:
        parse_manifest(data, "fuzz/index.json")
    except ShardError as exc:
        row.clear_error(exc.message, "fuzz/index.json")
    else:
        row.recovered()


def _edit(text: str, edits) -> str:
    chars = list(text)
    for pos, ch in edits:
        chars[pos] = ch
    return "".join(chars)


# --- credentials --------------------------------------------------------------------------------
def test_credentials_never_appear_in_any_output(
    tree: Path, s3_server, tmp_path: Path, record
) -> None:
    key_id = "AKIA" + uuid.uuid4().hex[:16].upper()
    secret = "sEcReT/" + uuid.uuid4().hex + "+XyZ"
    token = "ToKeN" + uuid.uuid4().hex
    env = {
        **s3_server.env,
        "AWS_ACCESS_KEY_ID": key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_SESSION_TOKEN": token,
    }
    bucket = f"c-{uuid.uuid4().hex[:12]}"
    s3_server.make_bucket(bucket)
    url = f"s3://{bucket}/ds"
    bench_json = tmp_path / "bench.json"
    outputs = []
    for args in (
        ("-vv", "pack", str(tree), url, "--max-count", "12", "--json"),
        ("-vvv", "inspect", url, "--json"),  # SDK debug logs print signed headers: scrubbed
        ("-vv", "verify", url, "--json"),
        (
            "-vv",
            "stream-bench",
            url,
            "--workers",
            "0",
            "--repeats",
            "1",
            "--image-size",
            "16",
            "--json",
            str(bench_json),
        ),
        ("pack", str(tree), "s3://no-such-bucket-here/x"),
        ("inspect", f"s3://{bucket}/missing"),
    ):
        r = run_cli(*args, env=env, check=False)
        outputs += [r.stdout, r.stderr]
    with FaultProxy(s3_server.port, ["503", "reset"] * 20) as proxy:  # retry logs and give-up
        r = run_cli(
            "-vv", "inspect", url, env={**env, "AWS_ENDPOINT_URL": proxy.endpoint_url}, check=False
        )
        outputs += [r.stdout, r.stderr]
    outputs.append(bench_json.read_text())
    text = "\n".join(outputs)
    assert "train-000000.tar" in text  # the commands did run
    for s in (key_id, secret, token, secret.split("/")[1]):
        assert s not in text
    record("credentials in logs, errors, progress, JSON").recovered()
