"""Conversations packed as they are published: LLaVA's .json (a list of rows, ShareGPT turns,
``image`` a path or a list), the messages form in JSON Lines (image parts naming their files,
or an ``images`` list), text-only rows; roles, turns and where each image goes kept in
KEY.json's ``messages``; the rows' ids as keys; inspect, verify and the loader read them."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from shard_writer.pack import PackOptions, pack
from shard_writer.verify import verify_dataset
from tests.conftest import jpeg_bytes, run_cli
from wdstool.base.errors import InputError

N = 12  # rows; every third is text-only, every fourth has two images


def _llava_rows(root: Path) -> list[dict]:
    (root / "images").mkdir(parents=True)
    rows = []
    for i in range(N):
        images = [] if i % 3 == 2 else [f"images/{i:03d}_{k}.jpg" for k in range(1 + (i % 4 == 0))]
        for k, p in enumerate(images):
            (root / p).write_bytes(jpeg_bytes(100 + 10 * i + k, (48 + 8 * k, 40)))
        marks = "".join("<image>\n" for _ in images)
        turns = [
            {"from": "human", "value": f"{marks}Question {i}: what is shown?"},
            {"from": "gpt", "value": f"Answer {i}: a photo."},
        ]
        if i % 2:
            turns += [{"from": "human", "value": "More?"}, {"from": "gpt", "value": "No more."}]
        row = {"id": f"llava-{i:04d}", "conversations": turns}
        if images:
            row["image"] = images[0] if len(images) == 1 else images
        rows.append(row)
    return rows


def _members(ds: Path) -> dict[str, dict[str, bytes]]:
    out: dict[str, dict[str, bytes]] = {}
    for shard in sorted(ds.glob("*.tar")):
        with tarfile.open(shard) as tf:
            for m in tf.getmembers():
                key, ext = m.name.split(".", 1)
                out.setdefault(key, {})[ext] = tf.extractfile(m).read()
    return out


def test_a_llava_json_packs_roles_turns_images_and_text_only_rows(tmp_path: Path) -> None:
    rows = _llava_rows(tmp_path)
    (tmp_path / "llava.json").write_text(json.dumps(rows))
    ds = tmp_path / "ds"
    summary = pack(str(tmp_path / "llava.json"), str(ds), PackOptions(workers=1))
    assert summary.samples == N
    samples = _members(ds)
    assert sorted(samples) == sorted(r["id"].replace("-", "-") for r in rows)  # ids as keys
    for row in rows:
        parts = samples[row["id"]]
        meta = json.loads(parts["json"])
        roles = [m["role"] for m in meta["messages"]]
        assert roles == ["user", "assistant"] * (len(row["conversations"]) // 2)
        first = meta["messages"][0]["content"]
        images = row.get("image", [])
        images = [images] if isinstance(images, str) else images
        assert [p["image"] for p in first if p["type"] == "image"] == [
            f"{k}.jpg" for k in range(len(images))
        ]
        assert sorted(e for e in parts if e.endswith(".jpg")) == [
            f"{k}.jpg" for k in range(len(images))
        ]
        for k, p in enumerate(images):
            assert parts[f"{k}.jpg"] == (tmp_path / p).read_bytes()
        text = [p["text"] for p in first if p["type"] == "text"][-1]
        assert text.endswith("what is shown?") and "<image>" not in text
        reply = meta["messages"][1]["content"]
        assert reply == [{"type": "text", "text": row["conversations"][1]["value"]}]
        assert meta["id"] == row["id"]
    report = verify_dataset(str(ds))
    assert report["num_samples"] == N and report["num_images"] == N - N // 3 + N // 4 - 1
    info = json.loads(run_cli("inspect", str(ds), "--json").stdout)
    assert info["num_samples"] == N
    assert "classes   none (no class labels)" in run_cli("inspect", str(ds)).stdout.splitlines()


def test_the_messages_form_in_json_lines(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(jpeg_bytes(1, (40, 32)))
    (tmp_path / "b.jpg").write_bytes(jpeg_bytes(2, (40, 32)))
    rows = [
        {  # image parts naming their files
            "messages": [
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": "a.jpg"},
                        {"type": "text", "text": "What?"},
                    ],
                },
                {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
            ]
        },
        {  # unnamed image parts, the files in an images list
            "images": ["b.jpg"],
            "messages": [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "?"}]},
                {"role": "assistant", "content": "A dog."},
            ],
        },
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
            ]
        },
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = tmp_path / "ds"
    assert (
        pack(str(tmp_path / "m.jsonl"), str(ds), PackOptions(workers=1, shuffle=False)).samples == 3
    )
    samples = list(_members(ds).values())
    metas = [json.loads(s["json"]) for s in samples]
    assert [len([e for e in s if e.endswith(".jpg")]) for s in samples] == [1, 1, 0]
    assert metas[0]["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "Be brief."}],
    }
    assert metas[1]["messages"][1]["content"] == [{"type": "text", "text": "A dog."}]
    assert samples[0]["0.jpg"] == (tmp_path / "a.jpg").read_bytes()
    assert samples[1]["0.jpg"] == (tmp_path / "b.jpg").read_bytes()
    assert verify_dataset(str(ds))["num_samples"] == 3


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ({"conversations": [{"from": "human", "value": "<image> hi"}]}, r"image 0 of the conversation has no path"),
        ({"image": ["x.jpg", "y.jpg"], "conversations": [{"from": "human", "value": "<image>"}]},
         r"lists 2 image\(s\), the conversation places 1"),
        ({"conversations": [{"value": "hi"}]}, r'a turn is \{"from": ROLE, "value": TEXT\}'),
        ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, r"a part is"),
    ],
)  # fmt: skip
def test_bad_rows_are_one_line_errors_naming_the_row(tmp_path: Path, row, error) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "x.jpg").write_bytes(jpeg_bytes(3))
    (tmp_path / "y.jpg").write_bytes(jpeg_bytes(4))
    (tmp_path / "l.json").write_text(json.dumps([row]))
    with pytest.raises(InputError, match=rf"l\.json: row 1: .*{error}"):
        pack(str(tmp_path / "l.json"), str(tmp_path / "ds"), PackOptions(workers=1))
    assert not (tmp_path / "ds" / "index.json").exists()


def test_key_column_and_ids_that_repeat(tmp_path: Path) -> None:
    rows = [{"id": "same", "sid": f"s{i}", "messages": [{"role": "user", "content": f"q{i}"},
            {"role": "assistant", "content": "a"}]} for i in range(3)]  # fmt: skip
    (tmp_path / "l.json").write_text(json.dumps(rows))
    ds = tmp_path / "ds"
    pack(str(tmp_path / "l.json"), str(ds), PackOptions(workers=1))  # ids repeat: by position
    assert all(not k.startswith("same") for k in _members(ds))
    pack(
        str(tmp_path / "l.json"), str(ds), PackOptions(workers=1, key_column="sid", overwrite=True)
    )
    assert sorted(_members(ds)) == ["s0", "s1", "s2"]
    with pytest.raises(
        InputError, match=r"key_column='id': .* give the key 'same'; keys must be unique"
    ):
        pack(
            str(tmp_path / "l.json"), str(tmp_path / "d2"), PackOptions(workers=1, key_column="id")
        )


def test_a_json_listing_that_is_not_a_list_of_rows(tmp_path: Path) -> None:
    (tmp_path / "l.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(InputError, match=r"l\.json: a \.json listing is a list of rows"):
        pack(str(tmp_path / "l.json"), str(tmp_path / "ds"), PackOptions(workers=1))
    buf = io.StringIO()
    assert buf.getvalue() == ""
