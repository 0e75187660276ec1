"""Qwen2-VL's inputs from the loader, checked against transformers itself: pixel_values and
image_grid_thw equal to Qwen2VLImageProcessor's on the same files (images tiny, large and 1:50),
3-D positions equal to the model's get_rope_index on each packed sample alone, and a tiny random
Qwen2VLForConditionalGeneration giving each packed sample the logits it gives it alone (attention
never crosses a boundary), with truncation and split pieces; a sample whose image a piece cuts
keeps no placeholder of it and no patches."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import torch
from PIL import Image

from loaders import Chat, Interleaved, Packing, TextTokenizer, make_loader
from loaders.families import Qwen2VL
from shard_writer.pack import PackOptions, pack
from tests.loaders.kinds.test_interleaved import _jpeg
from tests.support.tiny_models import qwen_model, qwen_processor, qwen_tokenizer

pytest.importorskip("transformers")
SIZES = [(20, 20), (900, 700), (1000, 20), (20, 700), (333, 444), (64, 96), (1200, 900), (57, 300)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("qwen2vl")
    (root / "img").mkdir()
    rows, files = [], {}
    for i, (w, h) in enumerate(SIZES):
        names = [f"img/{i}.jpg"] + ([f"img/{i}b.jpg"] if i % 3 == 0 else [])
        for k, name in enumerate(names):
            (root / name).write_bytes(_jpeg(7 * i + k, w if not k else h, h if not k else w))
        turns = [
            {"from": "human", "value": "<image>\n" * len(names) + f"What is picture {i}?"},
            {"from": "gpt", "value": "A pattern of noise, " * (1 + i % 3) + "in color."},
        ]
        rows.append({"id": f"q{i}", "image": names, "conversations": turns})
        files[f"q{i}"] = [root / n for n in names]
    rows.append({"id": "text", "conversations": [{"from": "human", "value": "Hello?"},
                                                 {"from": "gpt", "value": "Hi."}]})  # fmt: skip
    files["text"] = []
    (root / "rows.json").write_text(json.dumps(rows))
    pack(str(root / "rows.json"), str(root / "ds"), PackOptions(workers=1, max_count=4))
    folder, ids = qwen_tokenizer(root / "tok")
    proc = qwen_processor(max_pixels=112 * 112)
    tok = TextTokenizer(str(folder), image_token="<|image_pad|>")
    return {"ds": str(root / "ds"), "files": files, "proc": proc, "tok": tok, "ids": ids}


def _spec(world: dict[str, Any], packing: Packing | None = None) -> Interleaved:
    family = Qwen2VL.from_processor(world["proc"])
    return Interleaved(model=family, tokenizer=world["tok"], chat=Chat(), packing=packing)


def test_pixels_and_grids_equal_the_processors(world) -> None:  # type: ignore[no-untyped-def]
    spec = _spec(world)
    loader = make_loader(world["ds"], 1, output=spec, label=None, num_workers=0, seed=0)
    seen = 0
    for batch in loader:
        (key,) = batch["keys"]
        inputs = spec.model_inputs(batch)
        images = [Image.open(f).convert("RGB") for f in world["files"][key]]
        if not images:
            assert "pixel_values" not in inputs
            continue
        want = world["proc"](images=images, return_tensors="pt")
        assert torch.equal(inputs["image_grid_thw"], want["image_grid_thw"]), key
        assert inputs["pixel_values"].dtype == torch.float32
        assert torch.equal(inputs["pixel_values"], want["pixel_values"]), key
        # the placeholders: one per merged patch, Qwen2-VL's vision start/end around them
        grid = want["image_grid_thw"]
        assert int((inputs["input_ids"] == world["ids"]["<|image_pad|>"]).sum()) == int(
            (grid.prod(-1) // 4).sum()
        )
        # what crossed the process boundary: uint8, half the processor's float32 values / 4
        assert batch["images"].dtype == torch.uint8
        assert batch["images"].numel() * 2 == want["pixel_values"].numel()
        seen += 1
    assert seen == len(SIZES)


def _entries(batch: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(row, start, end) of each packed sample of a batch, in order."""
    B, L = batch["input_ids"].shape
    cu = batch["cu_seqlens"].tolist()
    rows = batch["sample_row"].tolist()
    out, k = [], 0
    for r in range(B):
        segments = [
            (a - r * L, b - r * L) for a, b in itertools.pairwise(cu) if r * L <= a < (r + 1) * L
        ]
        mine = rows.count(r)
        out += [(r, a, b) for a, b in segments[:mine]]
        k += mine
    return out


@pytest.mark.parametrize("overflow", ["truncate", "split"])
def test_packed_samples_get_their_own_positions_and_logits(world, overflow) -> None:  # type: ignore[no-untyped-def]
    model = qwen_model(world["ids"])
    spec = _spec(world, Packing(length=96, window=4, overflow=overflow))
    loader = make_loader(world["ds"], 2, output=spec, label=None, num_workers=2, seed=3)
    pad_id = world["ids"]["<|image_pad|>"]
    checked = 0
    for batch in loader:
        inputs = spec.model_inputs(batch)
        assert inputs["position_ids"].shape == (4, *batch["input_ids"].shape)
        with torch.no_grad():
            packed = model(**{k: v for k, v in inputs.items() if k != "labels"}).logits
        grids = inputs.get("image_grid_thw", torch.zeros((0, 3), dtype=torch.long))
        patch_at = torch.cat([torch.zeros(1, dtype=torch.long), (grids.prod(-1)).cumsum(0)])
        image_row, spans = batch["image_row"].tolist(), batch["image_spans"].tolist()
        for r, a, b in _entries(batch):
            ids = inputs["input_ids"][r, a:b]
            mine = [
                j
                for j, (row, (s, _n)) in enumerate(zip(image_row, spans, strict=True))
                if row == r and a <= s < b
            ]
            # every placeholder left in the entry belongs to an image it carries (a cut run's
            # tokens are padding), and the entry carries exactly those images' patches
            assert int((ids == pad_id).sum()) == sum(spans[j][1] for j in mine)
            alone: dict[str, Any] = {"input_ids": ids[None]}
            mm = (ids == pad_id).int()[None]
            if mine:
                alone["pixel_values"] = torch.cat(
                    [inputs["pixel_values"][patch_at[j] : patch_at[j + 1]] for j in mine]
                )
                alone["image_grid_thw"] = grids[mine]
                alone["mm_token_type_ids"] = mm
                want, _ = model.model.get_rope_index(ids[None], mm, grids[mine])
                assert torch.equal(inputs["position_ids"][1:, r, a:b], want[:, 0])
            else:
                assert torch.equal(
                    inputs["position_ids"][1:, r, a:b], torch.arange(b - a).expand(3, -1)
                )
            assert torch.equal(inputs["position_ids"][0, r, a:b], torch.arange(b - a))
            with torch.no_grad():
                own = model(**alone).logits[0]
            torch.testing.assert_close(packed[r, a:b], own, rtol=1e-5, atol=1e-5)
            checked += 1
    assert checked >= len(SIZES)
