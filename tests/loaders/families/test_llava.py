"""A LLaVA-style model's inputs from the loader, checked against transformers: pixel_values equal
to the (torchvision) CLIPImageProcessor's on the same files, within a few levels of the PIL one's
(its own resize), a fixed run of placeholders an image, and a tiny random
LlavaForConditionalGeneration giving each packed sample the logits it gives it alone."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from PIL import Image

from loaders import Chat, Interleaved, Packing, TextTokenizer, make_loader
from loaders.families import Llava
from shard_writer.pack import PackOptions, pack
from tests.loaders.families.test_qwen2_vl import SIZES, _entries
from tests.loaders.kinds.test_interleaved import _jpeg
from tests.support.tiny_models import llava_model, llava_processor, qwen_tokenizer

pytest.importorskip("transformers")
SIDE = 56  # (56 / 14)**2 = 16 tokens an image


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("llava")
    (root / "img").mkdir()
    rows, files = [], {}
    for i, (w, h) in enumerate(SIZES[:6]):
        (root / f"img/{i}.jpg").write_bytes(_jpeg(3 * i, w, h))
        turns = [
            {"from": "human", "value": f"<image>\nPicture {i}?"},
            {"from": "gpt", "value": "Noise " * (1 + i % 3) + "in color."},
        ]
        rows.append({"id": f"l{i}", "image": f"img/{i}.jpg", "conversations": turns})
        files[f"l{i}"] = root / f"img/{i}.jpg"
    (root / "rows.json").write_text(json.dumps(rows))
    pack(str(root / "rows.json"), str(root / "ds"), PackOptions(workers=1))
    folder, ids = qwen_tokenizer(root / "tok")
    return {"ds": str(root / "ds"), "files": files, "ids": ids,
            "tok": TextTokenizer(str(folder), image_token="<|image_pad|>")}  # fmt: skip


def _spec(world: dict[str, Any], packing: Packing | None = None) -> Interleaved:
    family = Llava.from_processor(llava_processor(SIDE))
    return Interleaved(model=family, tokenizer=world["tok"], chat=Chat(), packing=packing)


def test_pixels_equal_the_processors_and_a_fixed_run(world) -> None:  # type: ignore[no-untyped-def]
    from transformers import CLIPImageProcessorPil

    spec = _spec(world)
    fast, slow = (
        llava_processor(SIDE),
        CLIPImageProcessorPil(
            size={"shortest_edge": SIDE}, crop_size={"height": SIDE, "width": SIDE}
        ),
    )
    loader = make_loader(world["ds"], 1, output=spec, label=None, num_workers=0, seed=0)
    worst = 0.0
    for batch in loader:
        (key,) = batch["keys"]
        inputs = spec.model_inputs(batch)
        image = Image.open(world["files"][key]).convert("RGB")
        want = fast(images=[image], return_tensors="pt")["pixel_values"]
        assert inputs["pixel_values"].shape == (1, 3, SIDE, SIDE)
        assert torch.equal(inputs["pixel_values"], want), key
        pil = slow(images=[image], return_tensors="pt")["pixel_values"]
        worst = max(worst, float((inputs["pixel_values"] - pil).abs().max()))
        assert int((inputs["input_ids"] == world["ids"]["<|image_pad|>"]).sum()) == 16
    # the PIL processor resizes with Pillow: a few levels of 255 apart at most (normalized by
    # CLIP's std, ~0.27: 0.04 is about 3 levels)
    assert worst < 0.1, worst


def test_packed_samples_get_their_own_logits(world) -> None:  # type: ignore[no-untyped-def]
    model = llava_model(world["ids"], SIDE)
    spec = _spec(world, Packing(length=64, window=6))
    loader = make_loader(world["ds"], 2, output=spec, label=None, num_workers=2, seed=1)
    pad_id = world["ids"]["<|image_pad|>"]
    checked = 0
    for batch in loader:
        inputs = spec.model_inputs(batch)
        with torch.no_grad():
            packed = model(**{k: v for k, v in inputs.items() if k != "labels"}).logits
        image_row, spans = batch["image_row"].tolist(), batch["image_spans"].tolist()
        for r, a, b in _entries(batch):
            ids = inputs["input_ids"][r, a:b]
            mine = [j for j, (row, (s, _n)) in enumerate(zip(image_row, spans, strict=True))
                    if row == r and a <= s < b]  # fmt: skip
            alone: dict[str, Any] = {"input_ids": ids[None]}
            if mine:
                alone["pixel_values"] = inputs["pixel_values"][mine]
            assert int((ids == pad_id).sum()) == 16 * len(mine)
            with torch.no_grad():
                own = model(**alone).logits[0]
            torch.testing.assert_close(packed[r, a:b], own, rtol=1e-5, atol=1e-5)
            checked += 1
    assert checked == 6
