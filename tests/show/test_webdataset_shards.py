"""``wdstool show`` on shards written by upstream webdataset's ``TarWriter``: a pax header in
front of every member (its float ``mtime``), a pax ``path`` record where a key is not short
ASCII, members in the order of their extensions (``cls`` before ``jpg``, a caption on some
samples only). It shows real samples, whole, with their labels and captions, and reads at most
twice the bytes it shows, from a folder, from a web server and from S3 (ranged reads)."""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import webdataset as wds
from PIL import Image

from shard_writer.sample_data import render
from tests.show.conftest import spans
from tests.support.countproxy import CountingProxy
from tests.support.webserver import WebServer
from wdstool.format.fields import LabelSpec
from wdstool.format.tar_write import END, write_member
from wdstool.show import ShowConfig, build_report
from wdstool.show.ranged import ReadCounter, ShardFile
from wdstool.show.walk import ShardWalker, Wanted

SHARDS, PER_SHARD, CLASSES = 3, 20, 5
CONFIG = ShowConfig(samples=12, seed=4)


@dataclass(frozen=True)
class WdsTruth:
    """What the shards hold, by key."""

    root: Path
    shard_of: dict[str, str]
    label: dict[str, int]
    caption: dict[str, str | None]
    image: dict[str, bytes]
    ext: dict[str, str]
    size: dict[str, tuple[int, int]]


def _key(i: int) -> str:
    if i % 11 == 3:  # not ASCII: a pax path record, a stand-in in the ustar header
        return f"фото_{i:05d}"
    if i % 17 == 8:  # over 100 bytes: the same
        return f"{'long-' * 22}{i:05d}"
    return f"{i:05d}_photo"


def _image(i: int) -> tuple[str, bytes]:
    data = render(11, i, CLASSES, size=(400, 300))  # a ~75 KB photograph
    if i % 7 == 2:
        out = io.BytesIO()
        Image.open(io.BytesIO(data)).resize((200, 150)).save(out, format="PNG")
        return "png", out.getvalue()
    return "jpg", data


@pytest.fixture(scope="session")
def wds_shards(tmp_path_factory) -> WdsTruth:
    root = tmp_path_factory.mktemp("show-wds") / "shards"
    root.mkdir()
    shard_of, label, caption, image, exts, size = {}, {}, {}, {}, {}, {}
    for n in range(SHARDS):
        name = f"wds-{n:06d}.tar"
        with wds.TarWriter(str(root / name)) as sink:
            for i in range(n * PER_SHARD, (n + 1) * PER_SHARD):
                key = _key(i)
                ext, data = _image(i)
                sample = {"__key__": key, ext: data, "cls": str(i % CLASSES).encode()}
                caption[key] = f"a photo, number {i}" if i % 3 else None  # some have none
                if caption[key] is not None:
                    sample["txt"] = caption[key].encode()
                sink.write(sample)
                shard_of[key], label[key], image[key], exts[key] = name, i % CLASSES, data, ext
                size[key] = Image.open(io.BytesIO(data)).size
    with tarfile.open(root / "wds-000000.tar") as tf:  # what makes these shards hard to walk
        assert all(m.pax_headers for m in tf.getmembers())
    return WdsTruth(root, shard_of, label, caption, image, exts, size)


def _check_samples(report: dict, truth: WdsTruth) -> None:
    """Each shown sample is one written, whole: key, label, caption, image, bytes."""
    samples = report["samples"]
    assert len(samples) == CONFIG.samples
    assert len({s["key"] for s in samples}) == len(samples)
    where = {name: spans(truth.root / name) for name in {s["shard"] for s in samples}}
    for s in samples:
        key = s["key"]
        assert s["shard"] == truth.shard_of[key]
        assert (s["offset"], s["offset"] + s["bytes"]) == where[s["shard"]][key]
        assert s["label"] == truth.label[key]
        want_caption = {} if truth.caption[key] is None else {"caption": truth.caption[key]}
        assert s["fields"] == want_caption
        assert s["members"] == ["cls", truth.ext[key]] + ["txt"] * (truth.caption[key] is not None)
        assert (s["image"]["width"], s["image"]["height"]) == truth.size[key]
        assert s["image"]["nbytes"] == len(truth.image[key])
        assert s["problems"] == []


def test_show_reads_at_most_twice_what_it_shows_on_webdataset_shards(wds_shards) -> None:
    report = build_report(str(wds_shards.root), CONFIG)
    _check_samples(report, wds_shards)
    reads = report["reads"]
    assert reads["manifest_bytes"] == 0  # webdataset writes none: samples drawn by bytes
    assert reads["shown_bytes"] == sum(s["bytes"] for s in report["samples"])
    assert reads["bytes"] <= 2 * reads["shown_bytes"], reads
    # the header walks ran: the statistics cover more samples than are shown
    assert report["statistics"]["sampled"] > len(report["samples"])


@pytest.mark.slow
def test_show_on_the_web_and_s3_reads_what_it_says(
    wds_shards, s3_server, s3_bucket: str, tmp_path: Path
) -> None:
    """The same samples from a web server and from S3 as from the folder; the shard bytes the
    servers sent are the report's own count, within twice what is shown."""
    local = build_report(str(wds_shards.root), CONFIG)
    names = sorted(f.name for f in wds_shards.root.iterdir())
    pattern = f"wds-{{000000..{SHARDS - 1:06d}}}.tar"
    with WebServer(wds_shards.root) as srv:
        web = build_report(f"{srv.url}/{pattern}", CONFIG)
        web_sent = srv.total_sent(".tar")
    client = s3_server.client()
    for name in names:
        client.put_object(
            Bucket=s3_bucket, Key=f"wds/{name}", Body=(wds_shards.root / name).read_bytes()
        )
    with CountingProxy(s3_server.endpoint_url) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.endpoint_url}
        s3 = build_report(f"s3://{s3_bucket}/wds", CONFIG, storage_options=options)
        s3_sent = proxy.bytes_sent(".tar")  # the listing (no manifest) is not counted
    for report, sent in ((web, web_sent), (s3, s3_sent)):
        assert [(s["shard"], s["key"]) for s in report["samples"]] == [
            (s["shard"], s["key"]) for s in local["samples"]
        ]
        _check_samples(report, wds_shards)
        assert sent == report["reads"]["bytes"]  # the report's own count is honest
        assert sent <= 2 * report["reads"]["shown_bytes"]


def _truth_by_offset(path: Path) -> dict[int, tuple[str, dict[str, bytes]]]:
    """Sample start -> (key, members by extension), read with tarfile."""
    out: dict[str, tuple[int, dict[str, bytes]]] = {}
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            key, ext = m.name.split(".", 1)
            data = tf.extractfile(m).read()  # type: ignore[union-attr]
            out.setdefault(key, (m.offset, {}))[1][ext] = data
    return {offset: (key, parts) for key, (offset, parts) in out.items()}


@pytest.mark.parametrize("step", [1024, 16384])
def test_every_offset_of_a_pax_shard_finds_a_whole_sample(wds_shards, step: int) -> None:
    """Offsets in every header block and the data of every member (a pax header, the ustar
    header behind it, the first and last data block): the sample shown is a real one, with all
    its members (the one the offset falls into, or the next where its start is not told)."""
    path = wds_shards.root / "wds-000001.tar"
    truth = _truth_by_offset(path)
    offsets = []
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            last = m.offset_data + max(0, m.size - 1)
            offsets += [m.offset, m.offset + 512, m.offset_data - 512, m.offset_data, last]
    wanted = Wanted(exts=frozenset({"cls", "txt"}), label=LabelSpec.parse("cls"))
    size = os.path.getsize(path)
    for offset in offsets:
        with ShardFile(str(path), size, ReadCounter()) as f:
            walker = ShardWalker(f, 1, wanted, step, walk_share=None)
            shown, walked = walker.picks([offset], [2], lambda n: None)
        (picked,) = shown
        key, parts = truth[picked.facts.offset]
        assert picked.facts.key == key, offset
        assert picked.parts == parts, offset
        for facts in walked.values():
            assert truth[facts.offset][0] == facts.key, offset


def test_our_own_pax_keys_are_shown_whole(tmp_path: Path) -> None:
    """Keys pack writes behind a pax ``path`` record (not ASCII) in shards of our own layout
    (image first): every sample shown has its image and all its members (the backward chain
    once took the stand-in name behind the pax header for the key, and showed a sample's
    ``cls``, ``txt`` and ``json`` without its image)."""
    root = tmp_path / "shards"
    root.mkdir()
    members: dict[str, list[str]] = {}
    for n in range(2):
        with open(root / f"part-{n:03d}.tar", "wb") as f:
            for i in range(n * 15, (n + 1) * 15):
                key = f"фото_{i:03d}" if i % 2 else f"{i:06d}_photo"
                members[key] = ["jpg", "cls", "txt", "json"]
                write_member(f.write, f"{key}.jpg", render(5, i, 4, size=(160, 120)))
                write_member(f.write, f"{key}.cls", str(i % 4).encode())
                write_member(f.write, f"{key}.txt", f"photo {i}".encode())
                write_member(f.write, f"{key}.json", b'{"i": %d}' % i)
            f.write(END)
    for seed in range(4):
        report = build_report(str(root), ShowConfig(samples=8, seed=seed))
        for s in report["samples"]:
            assert s["members"] == members[s["key"]], s
            assert s["problems"] == [], s
            assert (s["offset"], s["offset"] + s["bytes"]) == spans(root / s["shard"])[s["key"]]
