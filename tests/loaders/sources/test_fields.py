"""Samples of any shape: labels from .cls or .json, extra fields, fields_fn, other tools' shards."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest
import torch
import webdataset as wds
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loaders import make_loader
from loaders.bench.tokenize import Tokenize
from tests.conftest import jpeg_bytes
from wdstool.base.errors import ConfigError, SampleError
from wdstool.format.fields import FieldError, FieldSpec, LabelSpec

# --- field specs ---------------------------------------------------------------------------
keys = st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=5)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=12,
)


def navigate(value, path):
    for k in path:
        if isinstance(value, dict):
            value = value.get(k)
        elif isinstance(value, list) and re.fullmatch("[0-9]+", k) and int(k) < len(value):
            value = value[int(k)]
        else:
            return None
    return value


@settings(max_examples=150, deadline=None)
@given(obj=json_values, path=st.lists(keys | st.sampled_from(["0", "1"]), min_size=1, max_size=3))
@example(obj=[], path=["²"])  # a digit to str.isdigit, not to int(): found by CI, once
@example(obj=[7, 8], path=["1"])
def test_json_path_reads_the_value_at_that_path(obj, path) -> None:
    spec = FieldSpec.parse("json:" + ".".join(path))
    assert spec.read({"json": json.dumps(obj).encode()}) == navigate(obj, path)
    assert spec.read({"jpg": b"x"}) is None  # no .json member: None


@settings(max_examples=100, deadline=None)
@given(text=st.text(), blob=st.binary(), ext=st.sampled_from(["npy", "seg.png", "pkl", "cls"]))
def test_text_and_bytes_fields(text, blob, ext) -> None:
    assert FieldSpec.parse("txt").read({"txt": text.encode("utf-8")}) == text
    assert FieldSpec.parse(ext).read({ext: blob}) == blob  # untouched, never unpickled
    assert FieldSpec.parse("json").read({"json": json.dumps({"t": text}).encode()}) == {"t": text}


@pytest.mark.parametrize("bad", ["", "txt:a", "json:", "json:a..b", "a b", "cls:x", ".jpg"])
def test_malformed_specs_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        FieldSpec.parse(bad)


def test_label_specs() -> None:
    assert LabelSpec.parse("cls").read({"cls": b" 7\n"}) == 7
    assert LabelSpec.parse("json:a.b").read({"json": b'{"a": {"b": 3}}'}) == 3
    for bad in ("txt", "json"):
        with pytest.raises(ValueError, match="not a label spec"):
            LabelSpec.parse(bad)
    with pytest.raises(FieldError, match="not an integer"):
        LabelSpec.parse("json:a").read({"json": b'{"a": "cat"}'})
    with pytest.raises(FieldError, match="not an integer"):
        LabelSpec.parse("json:a").read({"json": b'{"a": true}'})
    with pytest.raises(FieldError, match=r"no \.cls member"):
        LabelSpec.parse("cls").read({"jpg": b""})
    with pytest.raises(FieldError, match="not valid JSON"):
        LabelSpec.parse("json:a").read({"json": b"{nope"})
    with pytest.raises(FieldError, match="not UTF-8"):
        FieldSpec.parse("txt").read({"txt": b"\xff\xfe"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fields": {"labels": "txt"}}, "loader fills itself"),
        ({"fields": {"x": "json:"}}, r"fields\['x'\]"),
        ({"fields": {"not a name": "txt"}}, "not a usable batch key"),
        ({"fields": ["txt"]}, "must be a dict"),
        ({"label": "txt"}, "not a label spec"),
        ({"fields_fn": 3}, "fields_fn must be a callable"),
    ],
)
def test_bad_schema_is_a_config_error(uneven_dataset: Path, kwargs, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_loader(str(uneven_dataset), 4, num_workers=0, **kwargs)


# --- other tools' shards ---------------------------------------------------------------------
FIELDS = {"caption": "txt", "meta": "json", "url": "json:url", "score": "json:nested.score"}


def epoch(loader) -> list[dict]:
    return [b for b in loader]


def rows(batches: list[dict], names=("caption", "meta", "url", "score")) -> dict[str, tuple]:
    out = {}
    for b in batches:
        n = len(b["keys"])
        for name in names:
            assert len(b[name]) == n, name  # aligned with pixel_values
        assert (b["pixel_values"].shape[0] if "pixel_values" in b else len(b["offsets"]) - 1) == n
        for i, key in enumerate(b["keys"]):
            assert key not in out, key
            out[key] = tuple(b[name][i] for name in names)
    return out


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("form", ["folder", "pattern"])
def test_img2dataset_layout_through_the_fast_path(img2dataset_shards, workers, form) -> None:
    folder, written = img2dataset_shards
    source = str(folder) if form == "folder" else str(folder / "part-{00000..00002}.tar")
    loader = make_loader(
        source, 4, label=None, fields=FIELDS, image_size=32, num_workers=workers, seed=3
    )
    batches = epoch(loader)
    assert len(batches) == len(loader) == 6  # 21 samples, batches of 4
    assert all("labels" not in b for b in batches)
    got = rows(batches)
    assert set(got) == set(written)
    for key, (caption, meta, url, score) in got.items():
        w = written[key]
        assert caption == w["caption"]  # None where the sample has no .txt
        assert meta == w["meta"]
        assert url == w["meta"]["url"]
        assert score == w["meta"]["nested"]["score"]
    assert sum(c is None for c, *_ in got.values()) == 4


def test_label_from_json(img2dataset_shards) -> None:
    folder, written = img2dataset_shards
    loader = make_loader(str(folder), 5, label="json:class_id", image_size=32, num_workers=0)
    labels = {k: int(v) for b in loader for k, v in zip(b["keys"], b["labels"], strict=True)}
    assert labels == {k: w["meta"]["class_id"] for k, w in written.items()}


@pytest.mark.parametrize("output", ["float", "encoded", "channels_last"])
def test_fields_ride_with_every_output(img2dataset_shards, output) -> None:
    folder, written = img2dataset_shards
    kw = {"channels_last": True} if output == "channels_last" else {"output": output}
    loader = make_loader(
        str(folder), 4, label=None, fields={"caption": "txt"}, image_size=32, num_workers=2, **kw
    )
    got = rows(list(loader), names=("caption",))
    assert {k: v[0] for k, v in got.items()} == {k: w["caption"] for k, w in written.items()}


def test_fields_fn_tensors_are_stacked(img2dataset_shards) -> None:
    folder, written = img2dataset_shards
    tok = Tokenize("caption", length=8)
    loader = make_loader(
        str(folder),
        4,
        label=None,
        fields={"caption": "txt", "url": "json:url"},
        fields_fn=tok,
        image_size=32,
        num_workers=2,
    )
    for b in loader:
        ids = b["caption_ids"]
        assert ids.dtype == torch.int64 and ids.shape == (len(b["keys"]), 8)
        assert "caption" not in b  # fields_fn's dict is what the batch carries
        for i, key in enumerate(b["keys"]):
            want = tok({"caption": written[key]["caption"]})["caption_ids"]
            assert torch.equal(ids[i], torch.from_numpy(want))
            assert b["url"][i] == written[key]["meta"]["url"]


# --- bad samples -----------------------------------------------------------------------------
def write_shard(path: Path, samples: list[dict]) -> Path:
    with wds.TarWriter(str(path)) as sink:
        for s in samples:
            sink.write(s)
    return path


class FailOn:
    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, fields: dict) -> dict:
        if fields["k"] == self.key:
            raise RuntimeError("tokenizer exploded")
        return fields


@pytest.fixture
def mixed_shard(tmp_path: Path) -> Path:
    samples = []
    for i in range(12):
        meta = {"class_id": i % 4, "k": f"s{i:02d}"}
        if i == 3:
            meta = b"{not json"
        if i == 6:
            meta = {"class_id": "seven", "k": "s06"}
        samples.append({"__key__": f"s{i:02d}", "jpg": jpeg_bytes(i), "json": meta})
    return write_shard(tmp_path / "mixed.tar", samples)


def good_samples() -> list[dict]:
    return [
        {
            "__key__": f"s{i:02d}",
            "jpg": jpeg_bytes(i),
            "json": {"class_id": i % 4, "k": f"s{i:02d}"},
        }
        for i in range(12)
    ]


@pytest.mark.parametrize(
    ("bad_key", "json_value", "kwargs", "message"),
    [
        ("s03", b"{not json", {}, "not valid JSON"),
        ("s06", {"class_id": "seven", "k": "s06"}, {}, "is not an integer"),
        ("s09", None, {"fields_fn": FailOn("s09")}, "fields_fn raised RuntimeError: tokenizer"),
    ],
)
def test_a_bad_sample_is_one_line_naming_shard_and_key(
    tmp_path: Path, bad_key, json_value, kwargs, message
) -> None:
    samples = good_samples()
    if json_value is not None:
        samples[int(bad_key[1:])]["json"] = json_value
    shard = write_shard(tmp_path / "one-bad.tar", samples)
    loader = make_loader(
        str(shard),
        4,
        label="json:class_id",
        fields={"k": "json:k"},
        shuffle=False,
        image_size=32,
        num_workers=0,
        **kwargs,
    )
    with pytest.raises(SampleError) as err:
        list(loader)
    assert str(shard) in err.value.message and f"sample '{bad_key}'" in err.value.message
    assert message in err.value.message and "\n" not in err.value.message


def test_bad_samples_are_replaced_under_skip(mixed_shard) -> None:
    loader = make_loader(
        str(mixed_shard),
        4,
        label="json:class_id",
        fields={"k": "json:k"},
        fields_fn=FailOn("s09"),
        on_error="skip",
        max_replaced=None,  # two of a handful, on purpose
        image_size=32,
        num_workers=2,
    )
    batches = list(loader)
    assert [len(b["keys"]) for b in batches] == [4, 4, 4]  # counts exact
    assert loader.num_replaced == 3
    delivered = [k for b in batches for k in b["keys"]]
    assert not {"s03", "s06", "s09"} & set(delivered)
    for b in batches:  # a replacement carries its own (good) sample's fields and label
        assert b["k"] == b["keys"]
        assert [int(x) for x in b["labels"]] == [int(k[1:]) % 4 for k in b["keys"]]


def test_fields_fn_tensor_shapes_must_agree(img2dataset_shards) -> None:
    folder, _ = img2dataset_shards

    def ragged(fields: dict) -> dict:
        return {"ids": torch.zeros(len(fields["caption"] or "") % 3 + 1)}

    loader = make_loader(
        str(folder),
        4,
        label=None,
        fields={"caption": "txt"},
        fields_fn=ragged,
        image_size=32,
        num_workers=0,
        shuffle=False,
    )
    with pytest.raises(SampleError, match="pad to one length"):
        list(loader)


# --- what is read, and what is never unpickled ---------------------------------------------------
class Boom:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/wdstool-unpickled-marker"),))


def test_pickles_are_bytes_and_unrequested_members_unread(tmp_path: Path) -> None:
    marker = Path("/tmp/wdstool-unpickled-marker")
    marker.unlink(missing_ok=True)
    payload = pickle.dumps(Boom())
    big = b"\0" * (1 << 20)
    samples = [
        {"__key__": f"k{i}", "jpg": jpeg_bytes(i), "cls": b"1", "pkl": payload, "bin": big}
        for i in range(6)
    ]
    shard = write_shard(tmp_path / "p.tar", samples)
    plain = make_loader(str(shard), 3, image_size=32, num_workers=0)
    list(plain)
    assert plain.bytes_read < 6 * 64 * 1024  # the 1 MB .bin members were skipped unread
    loader = make_loader(
        str(shard), 3, fields={"obj": "pkl", "blob": "bin"}, image_size=32, num_workers=0
    )
    batches = list(loader)
    assert all(o == payload for b in batches for o in b["obj"])
    assert all(len(x) == len(big) for b in batches for x in b["blob"])
    assert loader.bytes_read > 6 * len(big)
    assert not marker.exists()


# --- resume --------------------------------------------------------------------------------------
@pytest.mark.parametrize("resume_workers", [2, 1])
def test_resume_with_fields(img2dataset_shards, resume_workers: int) -> None:
    """Same topology: exactly the uninterrupted run's batches; another worker count (elastic):
    every remaining sample once, each with its own caption and label."""
    folder, written = img2dataset_shards

    def loader(workers: int = 2):
        return make_loader(
            str(folder),
            3,
            label="json:class_id",
            fields={"caption": "txt"},
            image_size=32,
            num_workers=workers,
            seed=9,
        )

    def flat(batches):
        return [
            (k, c, int(lbl), p.sum().item())
            for b in batches
            for k, c, lbl, p in zip(
                b["keys"], b["caption"], b["labels"], b["pixel_values"], strict=True
            )
        ]

    full = flat(loader())
    first = loader()
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.state_dict()
    head = flat(head)
    del it
    rest = loader(resume_workers)
    rest.load_state_dict(json.loads(json.dumps(state)))
    tail = flat(rest)
    if resume_workers == 2:
        assert head + tail == full
    else:
        assert sorted(k for k, *_ in head + tail) == sorted(written)
    for key, caption, label, _ in head + tail:
        assert (caption, label) == (written[key]["caption"], written[key]["meta"]["class_id"])


def test_png_and_webp_images_of_other_tools_decode(img2dataset_shards) -> None:
    folder, written = img2dataset_shards
    loader = make_loader(str(folder), 7, label=None, train=False, image_size=32, num_workers=0)
    batches = list(loader)
    assert {written[k]["ext"] for b in batches for k in b["keys"]} == {"jpg", "png", "webp"}
    assert all(b["pixel_values"].float().std() > 0 for b in batches)
