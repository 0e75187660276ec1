"""Interleaved samples packed to a token budget, end to end on real shards and a real
tokenizer: every sample once per epoch over the ranks, no row over L, each sample's tokens as
the tokenizer lays them out, the same batches for any number of workers, equal steps on every
rank, and resume on the same or another topology exact."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

import pytest
import torch

from loaders import Interleaved, NativeResolution, Packing, TextTokenizer, make_loader
from loaders.kinds.interleaved import split_images
from tests.loaders.kinds.test_interleaved import _jpeg, _tar
from tests.support.tokenizers_local import save_json

L = 160
SAMPLES = 37
WORDS = [
    "a",
    "cat",
    "on",
    "a",
    "mat",
    "two",
    "dogs",
    "run",
    "along",
    "the",
    "beach",
    "at",
    "sunset",
]


def _text(k: int, part: int) -> str:
    n = 3 + (7 * k + 5 * part) % 23
    return " ".join(WORDS[(k + i) % len(WORDS)] for i in range(n))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, TextTokenizer]:
    root = tmp_path_factory.mktemp("packed")
    for s, ks in enumerate((range(0, 15), range(15, 26), range(26, SAMPLES))):
        members = []
        for k in ks:
            key = f"doc{k:03d}"
            texts: list[Any] = [_text(k, 0)]
            names: list[Any] = [None]
            for i in range(k % 3):
                members.append((f"{key}.{i}.jpg", _jpeg(1000 + 10 * k + i, 40 + 11 * i, 30 + k)))
                texts += [None, _text(k, i + 1)]
                names += [f"{i}.jpg", None]
            members.append((f"{key}.json", json.dumps({"texts": texts, "images": names}).encode()))
        _tar(root / f"docs-{s:06d}.tar", members)
    tok = TextTokenizer(str(save_json(root / "tokenizer.json")), image_token="<image>")
    return str(root / "docs-{000000..000002}.tar"), tok


def _spec(tok: TextTokenizer, window: int = 8) -> Interleaved:
    return Interleaved(
        native=NativeResolution(min_pixels=28 * 28, max_pixels=56 * 56),
        tokenizer=tok,
        packing=Packing(length=L, window=window),
    )


def _loader(data: tuple[str, TextTokenizer], rank: int = 0, ws: int = 1, **kw: Any) -> Any:
    src, tok = data
    kw = {"num_workers": 0, "seed": 3, "label": None, **kw}
    return make_loader(src, batch_size=2, output=_spec(tok), rank=rank, world_size=ws, **kw)


def _rows(batch: dict[str, Any]) -> list[tuple[str, ...]]:
    """Each row of a batch as the keys it holds, in order."""
    rows: list[list[str]] = [[] for _ in range(batch["input_ids"].shape[0])]
    for key, r in zip(batch["keys"], batch["sample_row"].tolist(), strict=True):
        rows[r].append(key)
    return [tuple(r) for r in rows]


def test_every_sample_once_over_the_ranks_rows_within_budget(data) -> None:  # type: ignore[no-untyped-def]
    _src, tok = data
    seen: Counter[str] = Counter()
    lens = []
    for rank in range(2):
        loader = _loader(data, rank, 2)
        lens.append(len(loader))
        n = 0
        for batch in loader:
            n += 1
            ids, pos, mask = batch["input_ids"], batch["position_ids"], batch["loss_mask"]
            assert ids.shape == (2, L)
            seen.update(batch["keys"])
            cu = batch["cu_seqlens"].tolist()
            assert cu[0] == 0 and cu[-1] == 2 * L and all(b > a for a, b in itertools.pairwise(cu))
            images = split_images(batch)
            for r in range(2):
                starts = (pos[r] == 0).nonzero().flatten().tolist()
                assert starts and starts[0] == 0
                for j, (img, row, (start, length)) in enumerate(
                    zip(
                        images,
                        batch["image_row"].tolist(),
                        batch["image_spans"].tolist(),
                        strict=True,
                    )
                ):
                    if row == r:
                        assert (ids[r, start : start + length] == tok.image_token_id).all(), j
                        assert not mask[r, start : start + length].any()
                        assert length == (img.shape[1] // 28) * (img.shape[2] // 28)
        assert n == len(loader)
    assert lens[0] == lens[1]
    assert sorted(seen) == [f"doc{k:03d}" for k in range(SAMPLES)]
    assert set(seen.values()) == {1}


def _expected(tok: TextTokenizer, k: int) -> torch.Tensor:
    """The tokenizer's layout of sample ``k`` as the fixture wrote it."""
    rule = _spec(tok).native
    assert rule is not None
    segments: list[Any] = [_text(k, 0)]
    counts = []
    for i in range(k % 3):
        h, w = rule.size(30 + k, 40 + 11 * i)
        counts.append((h // 28) * (w // 28))
        segments += [i, _text(k, i + 1)]
    return tok.encode_interleaved(segments, counts).input_ids


def test_each_sample_is_its_tokenizer_layout(data) -> None:  # type: ignore[no-untyped-def]
    """A row holds its samples one after another, each the tokenizer's ids of the sample (cut
    at L), positions from 0, then padding (masked out)."""
    _src, tok = data
    pad = _spec(tok).pad_id
    checked = 0
    for batch in _loader(data):
        ids, pos, mask = batch["input_ids"], batch["position_ids"], batch["loss_mask"]
        rows = batch["sample_row"].tolist()
        for r in range(ids.shape[0]):
            at = 0
            for key in [k for k, row in zip(batch["keys"], rows, strict=True) if row == r]:
                want = _expected(tok, int(key[3:]))
                take = min(len(want), L - at)
                assert torch.equal(ids[r, at : at + take], want[:take]), key
                assert torch.equal(pos[r, at : at + take], torch.arange(take)), key
                at += take
                checked += 1
            assert (ids[r, at:] == pad).all() and not mask[r, at:].any()
    assert checked == SAMPLES


@pytest.mark.slow
def test_the_same_batches_for_any_worker_count(data) -> None:  # type: ignore[no-untyped-def]
    def batches(**kw: Any) -> dict[tuple[tuple[str, ...], ...], torch.Tensor]:
        return {tuple(_rows(b)): b["input_ids"] for b in _loader(data, **kw)}

    base = batches()
    for kw in ({"num_workers": 2}, {"num_workers": 3, "worker_mode": "thread"}):
        other = batches(**kw)
        assert other.keys() == base.keys()
        assert all(torch.equal(other[k], v) for k, v in base.items())


def test_resume_on_the_same_topology_gives_the_same_batches(data) -> None:  # type: ignore[no-untyped-def]
    full = [(_rows(b), b["input_ids"]) for b in _loader(data, num_workers=2)]
    first = _loader(data, num_workers=2)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    resumed = _loader(data, num_workers=2)
    resumed.load_state_dict(state)
    rest = [(_rows(b), b["input_ids"]) for b in resumed]
    assert len(resumed) == len(full)
    assert [r for r, _ in rest] == [r for r, _ in full[3:]]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(rest, full[3:], strict=True))


def test_elastic_resume_delivers_every_remaining_sample_once(data) -> None:  # type: ignore[no-untyped-def]
    before: Counter[str] = Counter()
    states = []
    for rank in range(2):
        loader = _loader(data, rank, 2)
        it = iter(loader)
        for _ in range(2):
            before.update(next(it)["keys"])
        states.append(loader.state_dict())
    after: Counter[str] = Counter()
    lens = []
    for rank in range(3):
        loader = _loader(data, rank, 3, num_workers=1)
        loader.load_state_dict(states[0])
        lens.append(len(loader) - loader.start_batch)
        n = 0
        for batch in loader:
            after.update(batch["keys"])
            n += 1
        assert n == lens[-1]
    assert len(set(lens)) == 1  # equal steps on the new topology too
    assert before + after == Counter(f"doc{k:03d}" for k in range(SAMPLES))


def test_settings_a_packed_loader_refuses(data) -> None:  # type: ignore[no-untyped-def]
    from loaders import Source
    from wdstool.base.errors import ConfigError

    src, tok = data
    kw: dict[str, Any] = dict(batch_size=2, label=None, num_workers=0)
    with pytest.raises(ConfigError, match="mixtures are not packed yet"):
        make_loader([Source(src), Source(src)], output=_spec(tok), **kw)
    with pytest.raises(ConfigError, match="carries no fields"):
        make_loader(src, output=_spec(tok), fields={"t": "json"}, **kw)
    with pytest.raises(ConfigError, match="repeats and epoch_size"):
        make_loader(src, output=_spec(tok), repeats=2, **kw)
    with pytest.raises(ConfigError, match="size schedule"):
        spec = Interleaved(tokenizer=tok, packing=Packing(length=L))
        make_loader(src, output=spec, image_size={0: 32, 1: 48}, **kw)
    with pytest.raises(ConfigError, match="overflow is 'truncate' or 'drop'"):
        Packing(length=L, overflow="split")
    with pytest.raises(ConfigError, match="packing needs tokenizer"):
        Interleaved(packing=Packing(length=L))


def test_samples_longer_than_l_are_counted_and_cut(data, caplog) -> None:  # type: ignore[no-untyped-def]
    src, tok = data
    spec = Interleaved(
        native=NativeResolution(min_pixels=28 * 28, max_pixels=56 * 56),
        tokenizer=tok,
        packing=Packing(length=24, window=8),
    )
    with caplog.at_level("WARNING", logger="loaders.kinds.packed"):
        loader = make_loader(src, batch_size=2, output=spec, label=None, num_workers=0)
    long = sum(1 for k in range(SAMPLES) if len(_expected(tok, k)) > 24)
    assert long and f"packing: {long} of {SAMPLES} samples" in caplog.text
    for batch in loader:
        assert batch["input_ids"].shape == (2, 24)
        assert len(batch["keys"]) == len(set(batch["keys"]))
