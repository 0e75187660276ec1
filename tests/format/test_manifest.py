"""``index.json`` by value: what pack writes (wids' layout plus our fields, canonical bytes), what
a reader accepts, the one-line error for each way a manifest can be wrong, and how shard URLs
resolve against the manifest's place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wdstool.base.errors import ShardError
from wdstool.format.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    Manifest,
    ManifestNotFound,
    ShardEntry,
    base_url_of,
    build_manifest,
    load_manifest,
    manifest_url_for,
    parse_manifest,
    resolve_shard_url,
)

ENTRIES = (ShardEntry("a-0.tar", 3, 1536, "ab" * 32), ShardEntry("a-1.tar", 2, 1024, "cd" * 32))
WHERE = "s3://b/ds/index.json"


def _manifest() -> Manifest:
    return build_manifest(
        ENTRIES,
        classes=["cat", "dog"],
        fingerprint="f" * 64,
        options={"max_count": 3},
        skipped=[{"path": "z.jpg", "reason": "r"}, {"path": "a.jpg", "reason": "q"}],
        name="pets",
    )


def test_written_fields_and_canonical_bytes() -> None:
    m = _manifest()
    assert (m.num_samples, m.total_bytes, m.shard_sizes) == (5, 2560, [3, 2])
    assert m.skipped == ({"path": "a.jpg", "reason": "q"}, {"path": "z.jpg", "reason": "r"})
    raw = m.dumps()
    assert raw.endswith(b"}\n") and raw == _manifest().dumps()
    assert json.loads(raw) == {
        "__kind__": "wids-shard-index-v1",
        "wids_version": 1,
        "name": "pets",
        "format": "wdstool-manifest",
        "format_version": FORMAT_VERSION,
        "fingerprint": "f" * 64,
        "num_samples": 5,
        "total_bytes": 2560,
        "num_shards": 2,
        "classes": ["cat", "dog"],
        "pack_options": {"max_count": 3},
        "skipped": [{"path": "a.jpg", "reason": "q"}, {"path": "z.jpg", "reason": "r"}],
        "shardlist": [
            {"url": "a-0.tar", "nsamples": 3, "filesize": 1536, "sha256": "ab" * 32},
            {"url": "a-1.tar", "nsamples": 2, "filesize": 1024, "sha256": "cd" * 32},
        ],
    }
    text = raw.decode()
    assert text.index('"__kind__"') < text.index('"classes"') < text.index('"wids_version"')
    assert '\n "classes": [\n  "cat",' in text  # indent 1, sorted keys
    assert FORMAT_VERSION == 1 and MANIFEST_NAME == "index.json"


def test_round_trip() -> None:
    m = _manifest()
    assert parse_manifest(m.dumps(), WHERE) == m
    assert parse_manifest(m.dumps().decode(), WHERE) == m


def test_other_tools_manifests_are_read_with_defaults() -> None:
    """wids' own minimal index: no sha256, no filesize, no classes, no format fields."""
    m = parse_manifest(json.dumps({"shardlist": [{"url": "x.tar", "nsamples": 4}]}), WHERE)
    assert m.shards == (ShardEntry("x.tar", 4, -1, ""),)
    assert (m.classes, m.fingerprint, m.options, m.skipped, m.name) == ((), "", {}, (), "")
    odd = {
        "shardlist": [{"url": "x.tar", "nsamples": 0, "filesize": 0, "sha256": ""}],
        "format": "someone-else",
        "format_version": 99,  # another tool's versioning is not ours to refuse
        "pack_options": ["not", "a", "dict"],
        "skipped": [{"path": "p"}, "junk", 3],
        "fingerprint": 12,
        "name": 7,
    }
    m = parse_manifest(json.dumps(odd), WHERE)
    assert m.options == {} and m.skipped == ({"path": "p"},) and m.fingerprint == "12"
    assert m.name == "7" and m.shards[0].nsamples == 0
    assert parse_manifest(json.dumps({**odd, "skipped": {"a": 1}}), WHERE).skipped == ()
    assert parse_manifest(json.dumps({**odd, "skipped": 5}), WHERE).skipped == ()
    plain = build_manifest(ENTRIES, classes=[], fingerprint="", options={}, skipped=[])
    assert plain.name == "" and plain.skipped == () and plain.to_json()["name"] == ""


def _entry(**fields) -> dict:
    return json.dumps({"shardlist": [{"url": "a.tar", "nsamples": 1, **fields}]})


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"{not json", "not a valid JSON manifest: "),
        (b"\xff\xfe", "not a valid JSON manifest: "),
        (b"[]", "malformed manifest: top level is not an object"),
        (b'{"__kind__": "other"}', "unknown manifest kind 'other'"),
        (
            json.dumps({"format": "wdstool-manifest", "format_version": 2, "shardlist": []}),
            "manifest format version 2 is not supported (this wdstool reads version 1); "
            "upgrade wdstool or re-pack",
        ),
        (json.dumps({"format_version": "1", "shardlist": []}), "manifest format version '1'"),
        (b"{}", "malformed manifest: missing field 'shardlist'"),
        (b'{"shardlist": {}}', "malformed manifest: field 'shardlist' has the wrong type"),
    ],
)
def test_bad_manifests_name_the_url_and_the_problem(data, error: str) -> None:
    with pytest.raises(ShardError) as info:
        parse_manifest(data, WHERE)
    assert info.value.message.startswith(f"{WHERE}: {error}")
    assert "\n" not in info.value.message


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ('["a.tar", 1]', "malformed manifest: entry is not an object"),
        ('{"nsamples": 1}', "malformed manifest: missing field 'url'"),
        ('{"url": 5, "nsamples": 1}', "malformed manifest: field 'url' has the wrong type"),
        ('{"url": "a.tar"}', "malformed manifest: missing field 'nsamples'"),
        ('{"url": "a.tar", "nsamples": "1"}', "field 'nsamples' has the wrong type"),
        ('{"url": "a.tar", "nsamples": true}', "field 'nsamples' has the wrong type"),
        ('{"url": "a.tar", "nsamples": 1.0}', "field 'nsamples' has the wrong type"),
        ('{"url": "a.tar", "nsamples": -1}', "malformed manifest: negative nsamples -1"),
        ('{"url": "", "nsamples": 1}', "malformed manifest: empty or duplicate url ''"),
        ('{"url": "b.tar", "nsamples": 1}', "malformed manifest: empty or duplicate url 'b.tar'"),
        ('{"url": "a.tar", "nsamples": 1, "filesize": "9"}', "bad filesize or sha256"),
        ('{"url": "a.tar", "nsamples": 1, "filesize": false}', "bad filesize or sha256"),
        ('{"url": "a.tar", "nsamples": 1, "sha256": 5}', "bad filesize or sha256"),
        ('{"url": "a.tar", "nsamples": 0, "sha256": 5}', "bad filesize or sha256"),  # 0 is fine
    ],
)
def test_bad_entries_name_their_index(entry: str, error: str) -> None:
    data = f'{{"shardlist": [{{"url": "b.tar", "nsamples": 2}}, {entry}]}}'
    with pytest.raises(ShardError) as info:
        parse_manifest(data, WHERE)
    message = info.value.message
    assert message.startswith(f"{WHERE} shardlist[1]: malformed manifest: ")
    assert message.endswith(error)


def test_duplicate_urls_are_refused_in_the_fast_path_too() -> None:
    data = '{"shardlist": [{"url": "a.tar", "nsamples": 1}, {"url": "a.tar", "nsamples": 1}]}'
    with pytest.raises(ShardError, match=r"shardlist\[1\]: malformed manifest: empty or dup"):
        parse_manifest(data, WHERE)


@pytest.mark.parametrize("classes", ['"cat"', '["cat", 1]', "{}"])
def test_classes_must_be_names(classes: str) -> None:
    data = f'{{"shardlist": [], "classes": {classes}}}'
    with pytest.raises(ShardError) as info:
        parse_manifest(data, WHERE)
    assert info.value.message == f"{WHERE}: malformed manifest: 'classes' must be a list of names"


def test_urls() -> None:
    assert manifest_url_for("s3://b/ds") == "s3://b/ds/index.json"
    assert manifest_url_for("s3://b/ds/") == "s3://b/ds/index.json"
    assert manifest_url_for("/data/ds//") == "/data/ds/index.json"
    assert manifest_url_for("s3://b/dsX/") == "s3://b/dsX/index.json"
    assert manifest_url_for("s3://b/ds/custom.json") == "s3://b/ds/custom.json"
    assert base_url_of("s3://b/ds/index.json") == "s3://b/ds"
    assert base_url_of("index.json") == "."
    assert resolve_shard_url("s3://b/ds", "a.tar") == "s3://b/ds/a.tar"
    assert resolve_shard_url("s3://b/ds", "gs://other/a.tar") == "gs://other/a.tar"
    assert resolve_shard_url("s3://b/ds", "/abs/a.tar") == "/abs/a.tar"


def test_load_manifest_from_a_folder(tmp_path: Path) -> None:
    (tmp_path / "index.json").write_bytes(_manifest().dumps())
    m, base = load_manifest(str(tmp_path))
    assert m == _manifest() and base == str(tmp_path)
    with pytest.raises(ManifestNotFound) as info:
        load_manifest(str(tmp_path / "nothing"))
    assert info.value.message == (
        f"{tmp_path}/nothing/index.json: no manifest found (pack with `wdstool pack`, or pass "
        "a brace pattern of shard URLs)"
    )
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(ShardError, match=f"^{tmp_path}/bad.json: malformed manifest: top"):
        load_manifest(str(tmp_path / "bad.json"))


def test_load_manifest_passes_the_storage_options_on(tmp_path: Path) -> None:
    import fsspec

    fsspec.filesystem("memory").pipe("/m/ds/index.json", _manifest().dumps())
    cache = tmp_path / "cache"
    url = "simplecache::memory://m/ds"
    m, base = load_manifest(url, {"simplecache": {"cache_storage": str(cache)}})
    assert m == _manifest() and base == url
    assert any(p.is_file() for p in cache.iterdir())  # the options reached fsspec
