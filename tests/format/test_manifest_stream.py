"""A large manifest streamed into a shard table (wdstool/format/manifest_stream.py): for any
manifest written one way (ours, wids' compact or indented JSON, keys in any order), the table
equals the one the ordinary parse gives, whatever the pieces the bytes arrive in; anything
else (an escape, a float, a nested value, a duplicate URL, a non-ASCII name...) is left to the
ordinary parse (None), and a malformed manifest's facts are the ordinary parse's error."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wdstool.base.errors import ShardError
from wdstool.format.manifest import Manifest, ShardEntry, parse_manifest
from wdstool.format.manifest_stream import stream_table
from wdstool.format.sample_offsets import OffsetsFile, shards_digest
from wdstool.format.shard_table import table_of
from wdstool.format.table_digest import identity_digest, offsets_digest

COLUMNS = ("nsamples", "filesize", "sha256", "names", "name_ends")


def _reader(data: bytes, seed: int):
    """``read(n)`` handing ``data`` out in pieces of random small sizes (every boundary)."""
    rng, pos = random.Random(seed), [0]

    def read(n: int) -> bytes:
        k = min(n, rng.choice((1, 2, 7, 64, 300, 5000)))
        out = data[pos[0] : pos[0] + k]
        pos[0] += len(out)
        return out

    return read


def _ordinary(data: bytes):
    """The table the loader makes of the parsed manifest (identity as ``loaders.source``)."""
    import hashlib

    m = parse_manifest(data, "x")
    identity = (
        m.fingerprint
        or hashlib.sha256(
            "\n".join(f"{s.url}\0{s.nsamples}\0{s.sha256}" for s in m.shards).encode()
        ).hexdigest()
    )
    return table_of(m, identity)


def _equal(a, b) -> None:
    for c in COLUMNS:
        x, y = np.asarray(getattr(a, c)), np.asarray(getattr(b, c))
        assert [bytes(v) if isinstance(v, bytes) else v for v in x.tolist()] == [
            bytes(v) if isinstance(v, bytes) else v for v in y.tolist()
        ], c
    assert a.meta == b.meta


names = st.text(alphabet="abcxyz0123456789-_/.:", min_size=1, max_size=40)
entries = st.lists(
    st.tuples(
        names,
        st.integers(0, 10**12),
        st.one_of(st.none(), st.integers(-1, 10**15)),
        st.one_of(st.none(), st.sampled_from(["", "ab" * 32, "0123abcd" * 8, "x"])),
    ),
    min_size=2,
    max_size=60,
    unique_by=lambda e: e[0],
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries,
    st.sampled_from([None, 1, 2]),
    st.booleans(),
    st.booleans(),
    st.integers(0, 10**6),
    st.permutations(["url", "nsamples", "filesize", "sha256"]),
)
def test_any_manifest_of_one_layout_streams_into_the_parsed_table(
    rows, indent, fingerprint, offsets, seed, order
) -> None:
    keys_present = {"filesize": rows[0][2] is not None, "sha256": rows[0][3] is not None}
    shardlist = []
    for url, n, size, sha in rows:
        e: dict = {"url": url, "nsamples": n}
        if keys_present["filesize"]:
            e["filesize"] = size if size is not None else -1
        if keys_present["sha256"]:
            e["sha256"] = sha if sha is not None else ""
        shardlist.append({k: e[k] for k in order if k in e})
    obj: dict = {"__kind__": "wids-shard-index-v1", "shardlist": shardlist, "classes": ["a"]}
    if fingerprint:
        obj["fingerprint"] = "f" * 64
    if offsets:
        total = sum(r[1] for r in rows)
        digest = shards_digest(
            (e["url"], e["nsamples"], e.get("filesize", -1), e.get("sha256", "")) for e in shardlist
        )
        obj["sample_offsets"] = OffsetsFile(
            "index.offsets.npy", "<u4", 128, total, digest
        ).to_json()
    data = json.dumps(obj, indent=indent, sort_keys=seed % 3 == 0).encode()
    got = stream_table(_reader(data, seed), "x")
    assert got is not None
    _equal(got, _ordinary(data))


def test_what_pack_writes_streams_with_its_fingerprint_versions_and_offsets() -> None:
    shards = tuple(
        ShardEntry(f"train-{i:06d}.tar", 100 + i, 10**6 + i, f"{i:064x}") for i in range(50)
    )
    of = OffsetsFile(
        "index.offsets.npy", "<u4", 128, sum(s.nsamples for s in shards), shards_digest(shards)
    )
    m = Manifest(
        shards=shards, fingerprint="e" * 64, name="t", classes=("cat", "dog"), sample_offsets=of
    )
    data = m.dumps()
    got = stream_table(_reader(data, 1), "x")
    assert got is not None and got.meta["sample_offsets"] == of.to_json()
    _equal(got, _ordinary(data))


def test_the_digests_equal_those_of_the_manifests_objects() -> None:
    shards = tuple(
        ShardEntry(f"s{i}.tar", i * 7, -1 if i % 3 else 10**i, "" if i % 2 else "ab" * 32)
        for i in range(12)
    )
    table = table_of(Manifest(shards=shards), "x")
    assert offsets_digest(table) == shards_digest(shards)
    import hashlib

    want = hashlib.sha256("\n".join(f"{s.url}\0{s.nsamples}\0{s.sha256}" for s in shards).encode())
    assert identity_digest(table) == want.hexdigest()


def _ours(n: int = 4) -> dict:
    shards = [ShardEntry(f"s-{i}.tar", 10, 1000, "ab" * 32) for i in range(n)]
    return Manifest(shards=tuple(shards), fingerprint="f" * 64).to_json()


@pytest.mark.parametrize(
    "change",
    [
        {2: {"url": "caf\u00e9.tar"}},  # an escape (ensure_ascii)
        {1: {"nsamples": 10.0}},  # a float
        {3: {"offsets": [0] * 10}},  # a nested list (offsets kept in the manifest)
        {2: {"url": "s-0.tar"}},  # the same URL twice
        {0: {"extra": 1}},  # another key
        {1: {"nsamples": True}},  # a boolean
        {2: {"sha256": "ab" * 40}},  # a checksum past 64 characters
    ],
)
def test_anything_else_is_left_to_the_ordinary_parse(change: dict) -> None:
    data = json.dumps(_with(change), indent=1, sort_keys=True).encode()
    assert stream_table(_reader(data, 0), "x") is None


def _with(change: dict) -> dict:
    obj = _ours()
    for i, kv in change.items():
        obj["shardlist"][i].update(kv)
    return obj


def test_a_control_byte_a_leading_zero_or_a_cut_are_left_too() -> None:
    good = json.dumps(_ours(), indent=1, sort_keys=True).encode()
    assert stream_table(_reader(good, 0), "x") is not None
    for bad in (
        good.replace(b's-2.tar"', b's-2\x01.tar"'),
        good.replace(b'"nsamples": 10,', b'"nsamples": 010,', 1),
        good[: len(good) // 2],
        good.replace(b"\n ],\n", b"\n", 1),  # a list that never ends
    ):
        assert stream_table(_reader(bad, 0), "x") is None


def test_malformed_facts_are_the_ordinary_error() -> None:
    obj = _ours()
    obj["format_version"] = 99
    data = json.dumps(obj, indent=1, sort_keys=True).encode()
    with pytest.raises(ShardError, match="format version 99") as streamed:
        stream_table(_reader(data, 0), "x")
    with pytest.raises(ShardError) as ordinary:
        parse_manifest(data, "x")
    assert streamed.value.message == ordinary.value.message
