"""Conversations through the loader, end to end on shards ``pack`` wrote from a LLaVA-style
.json (text-only rows among them) and a tokenizer saved with its chat template: each sample's
ids are ``apply_chat_template``'s with its images' runs, the loss mask covers the assistant's
replies, labels are -100 outside it; packed and split over 2 ranks every sample once with its
mask; resume and elastic resume keep the masks; packed batches carry each sample's fields."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from loaders import Chat, Interleaved, NativeResolution, Packing, TextTokenizer, make_loader
from loaders.kinds.interleaved import split_images
from shard_writer.pack import PackOptions, pack
from tests.loaders.kinds.test_interleaved import _jpeg
from tests.support.tokenizers_local import chat_folder, image_token

pytest.importorskip("transformers")
N = 14
STYLE = "chatml"
NATIVE = NativeResolution(min_pixels=28 * 28, max_pixels=56 * 56)
L = 96


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("conversations")
    (root / "img").mkdir()
    rows = []
    for i in range(N):
        images = [] if i % 3 == 2 else [f"img/{i}_{k}.jpg" for k in range(1 + (i % 5 == 0))]
        for k, p in enumerate(images):
            (root / p).write_bytes(_jpeg(10 * i + k, 40 + 9 * k + i, 30 + 2 * i))
        turns = [
            {"from": "human", "value": "".join("<image>\n" for _ in images) + f"Q{i} on a mat?"},
            {"from": "gpt", "value": "Yes, " + "a cat " * (1 + i % 4) + "on a mat."},
        ]
        if i % 2:
            turns += [{"from": "human", "value": "Why?"}, {"from": "gpt", "value": "It is warm."}]
        row = {"id": f"c{i:03d}", "source": "llava" if images else "text", "conversations": turns}
        if images:
            row["image"] = images if len(images) > 1 else images[0]
        rows.append(row)
    (root / "llava.json").write_text(json.dumps(rows))
    pack(str(root / "llava.json"), str(root / "ds"), PackOptions(workers=1, max_count=5))
    folder = chat_folder(root / "tok", STYLE, generation=False)
    return {"ds": str(root / "ds"), "tok": folder, "rows": {r["id"]: r for r in rows}}


def _spec(
    data: dict[str, Any], packing: Packing | None = None, loss: str = "assistant"
) -> Interleaved:
    tok = TextTokenizer(str(data["tok"]), image_token=image_token(STYLE))
    return Interleaved(native=NATIVE, tokenizer=tok, chat=Chat(loss=loss), packing=packing)


def _expected(data: dict[str, Any], key: str, runs: list[int]) -> tuple[list[int], list[bool]]:
    """transformers' ids and assistant mask of the sample (its template marked with
    {% generation %}), each image placeholder made a run of ``runs[i]`` tokens."""
    from transformers import AutoTokenizer

    folder = Path(data["tok"]).parent / "tok-marked"
    if not folder.exists():
        chat_folder(folder, STYLE, generation=True)
    hf = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    messages = []
    for turn in data["rows"][key]["conversations"]:
        role = "user" if turn["from"] == "human" else "assistant"
        pieces = turn["value"].split("<image>")
        content: list[dict[str, Any]] = []
        for n, piece in enumerate(pieces):
            if n:
                content.append({"type": "image"})
            if piece:
                content.append({"type": "text", "text": piece})
        messages.append({"role": role, "content": content})
    out = hf.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    pad = hf.convert_tokens_to_ids(image_token(STYLE))
    ids, mask, it = [], [], iter(runs)
    for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True):
        n = next(it) if i == pad else 1
        ids += [i] * n
        mask += [bool(m)] * n
    return ids, mask


def test_ids_masks_and_labels_of_each_conversation(data) -> None:  # type: ignore[no-untyped-def]
    spec = _spec(data)
    loader = make_loader(data["ds"], 3, output=spec, label=None, num_workers=0, seed=1)
    seen = 0
    for batch in loader:
        images = split_images(batch)
        for i, key in enumerate(batch["keys"]):
            n = int(batch["input_ids_lengths"][i])
            mine = [j for j, o in enumerate(batch["image_owner"].tolist()) if o == i]
            runs = [spec.tokens_of(images[j].shape[1], images[j].shape[2]) for j in mine]
            ids, mask = _expected(data, key, runs)
            assert batch["input_ids"][i, :n].tolist() == ids
            assert batch["loss_mask"][i, :n].tolist() == mask
            labels = batch["labels"][i, :n]
            assert labels.tolist() == [t if m else -100 for t, m in zip(ids, mask, strict=True)]
            assert (batch["labels"][i, n:] == -100).all() and not batch["loss_mask"][i, n:].any()
            seen += 1
    assert seen == N


@pytest.mark.parametrize("overflow", ["truncate", "split"])
def test_packed_over_two_ranks_every_sample_once_with_its_mask(data, overflow) -> None:  # type: ignore[no-untyped-def]
    packing = Packing(length=L, window=6, overflow=overflow)
    spec = _spec(data, packing)
    full = {k: _spec_ids(data, k) for k in data["rows"]}
    seen: Counter[str] = Counter()
    tokens: dict[str, list[tuple[int, list[int], list[bool]]]] = {}
    for rank in range(2):
        loader = make_loader(
            data["ds"], 2, output=spec, label=None, num_workers=2, seed=4, rank=rank,
            world_size=2, fields={"origin": "json:source", "id": "json:id"},
        )  # fmt: skip
        for batch in loader:
            assert batch["labels"].shape == batch["input_ids"].shape
            cu = batch["cu_seqlens"].tolist()
            # the entries: each packed sample's tokens, in order; its id and source fields
            assert batch["id"] == batch["keys"] and len(batch["origin"]) == len(batch["keys"])
            flat_ids = batch["input_ids"].flatten()
            flat_mask = batch["loss_mask"].flatten()
            flat_labels = batch["labels"].flatten()
            pos = batch["position_ids"].flatten()
            starts = [a for a in cu[:-1] if pos[a] == 0 and flat_ids[a] != 0][: len(batch["keys"])]
            for key, a in zip(batch["keys"], starts, strict=False):
                end = next(b for b in cu if b > a)
                tokens.setdefault(key, []).append(
                    (a, flat_ids[a:end].tolist(), flat_mask[a:end].tolist())
                )
                assert flat_labels[a] == -100  # no target across a sample boundary
                assert batch["origin"][batch["keys"].index(key)] in ("llava", "text")
            seen.update(batch["keys"])
    assert set(seen) == set(data["rows"])
    if overflow == "truncate":
        assert set(seen.values()) == {1}
    for key, pieces in tokens.items():
        ids = [t for _a, p, _m in pieces for t in p]
        mask = [m for _a, _p, ms in pieces for m in ms]
        want_ids, want_mask = full[key]
        assert ids == want_ids[: len(ids)] and mask == want_mask[: len(mask)]


def _spec_ids(data: dict[str, Any], key: str) -> tuple[list[int], list[bool]]:
    """The sample's ids and mask as the unpacked loader gives them (checked against
    transformers above)."""
    cache = data.setdefault("_ids", {})
    if not cache:
        loader = make_loader(data["ds"], 4, output=_spec(data), label=None, num_workers=0, seed=1)
        for batch in loader:
            for i, k in enumerate(batch["keys"]):
                n = int(batch["input_ids_lengths"][i])
                cache[k] = (batch["input_ids"][i, :n].tolist(), batch["loss_mask"][i, :n].tolist())
    return cache[key]  # type: ignore[no-any-return]


def test_resume_and_elastic_resume_keep_the_masks(data) -> None:  # type: ignore[no-untyped-def]
    spec = _spec(data, Packing(length=L, window=6))

    def run(ws: int, rank: int, workers: int, state: Any = None) -> Any:
        loader = make_loader(
            data["ds"], 2, output=spec, label=None, num_workers=workers, seed=5, rank=rank,
            world_size=ws,
        )  # fmt: skip
        if state is not None:
            loader.load_state_dict(state)
        return loader

    full = [(b["keys"], b["input_ids"], b["loss_mask"]) for b in run(1, 0, 2)]
    first = run(1, 0, 2)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    rest = [(b["keys"], b["input_ids"], b["loss_mask"]) for b in run(1, 0, 2, state)]
    assert [k for k, _, _ in rest] == [k for k, _, _ in full[2:]]
    assert all(torch.equal(a, b) for (_, _, a), (_, _, b) in zip(rest, full[2:], strict=True))
    # on 2 ranks: every remaining sample once, each with the mask it has alone
    got: Counter[str] = Counter(k for keys, _, _ in full[:2] for k in keys)
    for rank in range(2):
        for batch in run(2, rank, 1, state):
            for key, r in zip(batch["keys"], batch["sample_row"].tolist(), strict=True):
                got[key] += 1
                ids, mask = _spec_ids(data, key)
                row = batch["input_ids"][r].tolist()
                at = next(j for j in range(len(row)) if row[j : j + len(ids)] == ids)
                assert batch["loss_mask"][r, at : at + len(ids)].tolist() == mask
    assert set(got) == set(data["rows"]) and set(got.values()) == {1}


def test_text_only_batches_and_the_last_reply(data) -> None:  # type: ignore[no-untyped-def]
    """Rows without an image are samples with no image; loss='last' keeps the last reply only:
    a part of the assistant mask, after every reply it leaves out."""
    spec = _spec(data, loss="last")
    loader = make_loader(data["ds"], 2, output=spec, label=None, num_workers=0, seed=2)
    text_only = 0
    for batch in loader:
        for i, key in enumerate(batch["keys"]):
            if not (batch["image_owner"] == i).any():
                assert data["rows"][key]["source"] == "text"
                text_only += 1
            ids, mask = _spec_ids(data, key)
            last = batch["loss_mask"][i, : len(ids)].tolist()
            assert any(last) and all(m for m, x in zip(mask, last, strict=True) if x)
            left_out = [j for j, m in enumerate(mask) if m and not last[j]]
            assert not left_out or last.index(True) > max(left_out)
    assert text_only == sum(r["source"] == "text" for r in data["rows"].values()) > 0
