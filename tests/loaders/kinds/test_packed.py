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
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _segments(tok: TextTokenizer, k: int) -> tuple[list[Any], list[int]]:
    """Sample ``k``'s segments as the fixture wrote it, and its images' placeholder counts."""
    rule = _spec(tok).native
    assert rule is not None
    segments: list[Any] = [_text(k, 0)]
    counts = []
    for i in range(k % 3):
        h, w = rule.size(30 + k, 40 + 11 * i)
        counts.append((h // 28) * (w // 28))
        segments += [i, _text(k, i + 1)]
    return segments, counts


def _expected(tok: TextTokenizer, k: int) -> torch.Tensor:
    """The tokenizer's layout of sample ``k`` as the fixture wrote it."""
    return tok.encode_interleaved(*_segments(tok, k)).input_ids


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
def test_the_same_batches_in_the_same_order_for_any_worker_count(data) -> None:  # type: ignore[no-untyped-def]
    """The rank's batches are dealt to its workers a batch at a time, so every worker has
    some however few the windows, and the loader delivers them in the plan's order."""

    def batches(**kw: Any) -> list[tuple[tuple[tuple[str, ...], ...], torch.Tensor]]:
        return [(tuple(_rows(b)), b["input_ids"]) for b in _loader(data, **kw)]

    base = batches()
    for kw in ({"num_workers": 2}, {"num_workers": 3, "worker_mode": "thread"}):
        other = batches(**kw)
        assert [r for r, _ in other] == [r for r, _ in base]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(other, base, strict=True))


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
    from wdstool.base.errors import ConfigError

    src, tok = data
    kw: dict[str, Any] = dict(batch_size=2, label=None, num_workers=0)
    with pytest.raises(ConfigError, match="repeats and epoch_size"):
        make_loader(src, output=_spec(tok), repeats=2, **kw)
    with pytest.raises(ConfigError, match="size schedule"):
        spec = Interleaved(tokenizer=tok, packing=Packing(length=L))
        make_loader(src, output=spec, image_size={0: 32, 1: 48}, **kw)
    with pytest.raises(ConfigError, match="overflow is 'truncate', 'split' or 'drop'"):
        Packing(length=L, overflow="wrap")
    with pytest.raises(ConfigError, match="weights_in is 'samples' or 'tokens', got 'bytes'"):
        Packing(length=L, weights_in="bytes")
    with pytest.raises(ConfigError, match="packing needs tokenizer"):
        Interleaved(packing=Packing(length=L))


def test_a_packed_batch_carries_each_samples_fields(data) -> None:  # type: ignore[no-untyped-def]
    """fields= (and a mixture's per-source fields) come as one entry per packed sample, in the
    order of keys and sample_row; a source without them gives None."""
    from loaders import Source

    src, tok = data
    kw: dict[str, Any] = dict(batch_size=2, label=None, num_workers=2)
    seen = 0
    for batch in make_loader(src, output=_spec(tok), fields={"meta": "json"}, **kw):
        assert len(batch["meta"]) == len(batch["keys"]) == len(batch["sample_row"])
        for meta in batch["meta"]:
            assert isinstance(meta, dict) and "texts" in meta
            seen += 1
    assert seen == SAMPLES
    mixed = make_loader(
        [Source(src), Source(src, fields={"meta": "json"})], output=_spec(tok), **kw
    )
    values = [m for b in mixed for m in b["meta"]]
    assert values.count(None) and any(isinstance(m, dict) for m in values)


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


# --- a weighted mixture of two sources ----------------------------------------------------------

CAPTIONS = 57  # source 1: samples of one length (text, one 60x50 image, text)
LONG = " ".join(WORDS[(3 * i) % len(WORDS)] for i in range(50))


@pytest.fixture(scope="module")
def captions(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("captions")
    for s, ks in enumerate((range(0, 30), range(30, CAPTIONS))):
        members = []
        for k in ks:
            key = f"cap{k:03d}"
            members.append((f"{key}.0.jpg", _jpeg(5000 + k, 60, 50)))
            doc = {"texts": [LONG, None, "the end"], "images": [None, "0.jpg", None]}
            members.append((f"{key}.json", json.dumps(doc).encode()))
        _tar(root / f"caps-{s:06d}.tar", members)
    return str(root / "caps-{000000..000001}.tar")


def _expected_caption(tok: TextTokenizer) -> torch.Tensor:
    rule = _spec(tok).native
    assert rule is not None
    h, w = rule.size(50, 60)
    return tok.encode_interleaved([LONG, 0, "the end"], [(h // 28) * (w // 28)]).input_ids


def _layout(tok: TextTokenizer, key: str) -> torch.Tensor:
    return _expected(tok, int(key[3:])) if key.startswith("doc") else _expected_caption(tok)


def _mix_loader(data, captions: str, weights, weights_in="samples", **kw: Any) -> Any:  # type: ignore[no-untyped-def]
    from loaders import Source

    src, tok = data
    spec = Interleaved(
        native=NativeResolution(min_pixels=28 * 28, max_pixels=56 * 56),
        tokenizer=tok,
        packing=Packing(length=L, window=8, weights_in=weights_in),
    )
    kw = {"num_workers": 0, "seed": 3, "label": None, **kw}
    sources = [Source(src, weight=weights[0]), Source(captions, weight=weights[1])]
    return make_loader(sources, batch_size=2, output=spec, **kw)


def _per_source(keys: Counter[str]) -> list[int]:
    return [sum(n for k, n in keys.items() if k.startswith(p)) for p in ("doc", "cap")]


def test_mixture_packs_each_source_its_share_as_its_tokenizer_lays_it_out(data, captions) -> None:  # type: ignore[no-untyped-def]
    """Weights in samples: each source's samples number the mixture plan's share (the
    over-weighted one read more than once: each of its samples once or twice), every row is its
    samples' tokenizer layouts one after another, and ``source`` says each sample's source."""
    from loaders.plan import apportion

    _src, tok = data
    pad = _spec(tok).pad_id
    loader = _mix_loader(data, captions, (2, 1))
    keys: Counter[str] = Counter()
    n = 0
    for batch in loader:
        n += 1
        ids, pos = batch["input_ids"], batch["position_ids"]
        assert ids.shape == (2, L)
        assert batch["source"].tolist() == [int(k.startswith("cap")) for k in batch["keys"]]
        keys.update(batch["keys"])
        rows = batch["sample_row"].tolist()
        for r in range(2):
            at = 0
            for key in [k for k, row in zip(batch["keys"], rows, strict=True) if row == r]:
                want = _layout(tok, key)
                assert len(want) <= L - at
                assert torch.equal(ids[r, at : at + len(want)], want), key
                assert torch.equal(pos[r, at : at + len(want)], torch.arange(len(want))), key
                at += len(want)
            assert (ids[r, at:] == pad).all()
    assert n == len(loader)
    shares = apportion(SAMPLES + CAPTIONS, [2, 1])
    assert _per_source(keys) == shares
    q, extra = divmod(shares[0], SAMPLES)  # the documents, read 1 + a window of the walk
    assert q == 1 and extra
    docs = sorted(n for k, n in keys.items() if k.startswith("doc"))
    assert docs == [q] * (SAMPLES - extra) + [q + 1] * extra
    assert set(n for k, n in keys.items() if k.startswith("cap")) == {1}


def test_mixture_weights_in_tokens_share_the_tokens(data, captions) -> None:  # type: ignore[no-untyped-def]
    """Weights in tokens: sample weights w_i / m_i (m_i: source i's mean tokens a sample), so
    each source's sample count is apportion(N, w / m), and where each source's tokens are
    exactly s_i * m_i (here: the documents read in whole passes, the captions all of one
    length), the tokens miss the weights by exactly the rounding of the sample shares:
    T_0 - T * w_0 / W = e_0 * (w_1 m_0 + w_0 m_1) / W, e_0 = s_0 - N v_0 / V, |e_0| < 1."""
    from loaders.plan import apportion

    _src, tok = data
    weights = (2, 1)
    lengths = [
        [min(len(_expected(tok, k)), L) for k in range(SAMPLES)],
        [len(_expected_caption(tok))] * CAPTIONS,
    ]
    means = [sum(x) / len(x) for x in lengths]
    v = [w / m for w, m in zip(weights, means, strict=True)]
    N = SAMPLES + CAPTIONS
    shares = apportion(N, v)
    assert shares != apportion(N, weights)  # in tokens, not in samples
    keys: Counter[str] = Counter()
    tokens = [0, 0]
    for batch in _mix_loader(data, captions, weights, "tokens"):
        keys.update(batch["keys"])
        for key, source in zip(batch["keys"], batch["source"].tolist(), strict=True):
            tokens[source] += min(len(_layout(tok, key)), L)
    assert _per_source(keys) == shares
    assert shares[0] % SAMPLES == 0  # the design: tokens are s_i * m_i exactly
    assert tokens == [shares[0] // SAMPLES * sum(lengths[0]), shares[1] * lengths[1][0]]
    W, T = sum(weights), sum(tokens)
    e = shares[0] - N * v[0] / sum(v)
    bound = (weights[1] * means[0] + weights[0] * means[1]) / W
    assert abs(e) < 1
    assert tokens[0] - T * weights[0] / W == pytest.approx(e * bound, abs=1e-6)
    assert abs(tokens[0] - T * weights[0] / W) < bound


def test_mixture_resumed_on_other_workers_delivers_the_rest_once(data, captions) -> None:  # type: ignore[no-untyped-def]
    """A mid-epoch state of a mixture resumed with another worker count: the interrupted
    batches and the rest hold every sample the uninterrupted epoch does, as many times."""
    full: Counter[str] = Counter()
    for batch in _mix_loader(data, captions, (2, 1)):
        full.update(batch["keys"])
    first = _mix_loader(data, captions, (2, 1))
    it = iter(first)
    before: Counter[str] = Counter()
    for _ in range(3):
        before.update(next(it)["keys"])
    state = first.state_dict()
    resumed = _mix_loader(data, captions, (2, 1), num_workers=2)
    resumed.load_state_dict(state)
    after: Counter[str] = Counter()
    n = 0
    for batch in resumed:
        assert batch["source"].tolist() == [int(k.startswith("cap")) for k in batch["keys"]]
        after.update(batch["keys"])
        n += 1
    assert n == len(resumed) - resumed.start_batch
    assert before + after == full
    assert max(full.values()) == 2  # a sample read twice is delivered twice, no more


def test_mixture_a_sample_read_twice_gets_its_own_draw(data, captions) -> None:  # type: ignore[no-untyped-def]
    """An over-weighted source's sample comes twice in the epoch, each reading its own
    augmentation draw (its rep): with a random crop, its images differ between the two."""
    from loaders import Source

    src, tok = data
    spec = Interleaved(tokenizer=tok, packing=Packing(length=L, window=8))
    loader = make_loader(
        [Source(src, weight=2), Source(captions, weight=1)],
        batch_size=2,
        output=spec,
        image_size=28,
        train=True,
        label=None,
        num_workers=0,
        seed=3,
    )
    seen: dict[str, list[list[torch.Tensor]]] = {}
    for batch in loader:
        images = split_images(batch)
        rows = batch["sample_row"].tolist()
        for r in range(batch["input_ids"].shape[0]):
            keys = [k for k, row in zip(batch["keys"], rows, strict=True) if row == r]
            starts = (batch["position_ids"][r] == 0).nonzero().flatten().tolist()[: len(keys)]
            mine: list[list[torch.Tensor]] = [[] for _ in keys]
            for img, row, (start, _n) in zip(
                images, batch["image_row"].tolist(), batch["image_spans"].tolist(), strict=True
            ):
                if row == r:
                    mine[max(j for j, s in enumerate(starts) if s <= start)].append(img)
            for key, imgs in zip(keys, mine, strict=True):
                seen.setdefault(key, []).append(imgs)
    twice = {k: v for k, v in seen.items() if len(v) == 2 and v[0]}
    assert len(twice) >= 10
    for key, (a, b) in twice.items():
        assert len(a) == len(b) == int(key[3:]) % 3
        assert any(not torch.equal(x, y) for x, y in zip(a, b, strict=True)), key


# --- cut image runs, and samples split over sequences ---------------------------------------


def _check_image_tokens(batch: dict[str, Any], tok: TextTokenizer) -> None:
    """What a Qwen2-VL-style model checks: the image-placeholder tokens of ``input_ids`` are
    exactly the delivered images' runs (no token of a cut run left), each run of image tokens
    its image's size, out of the loss."""
    ids, mask, spans = batch["input_ids"], batch["loss_mask"], batch["image_spans"]
    assert int((ids == tok.image_token_id).sum()) == int(spans[:, 1].sum())
    for img, r, (start, length) in zip(
        split_images(batch), batch["image_row"].tolist(), spans.tolist(), strict=True
    ):
        assert (ids[r, start : start + length] == tok.image_token_id).all()
        assert not mask[r, start : start + length].any()
        assert length == (img.shape[1] // 28) * (img.shape[2] // 28)


def test_truncation_leaves_no_token_of_a_cut_image(data) -> None:  # type: ignore[no-untyped-def]
    """At L=24 the cut of doc023 falls in its second image's run (tokens 23-26): the image is
    dropped and its first token, left in the row, is the pad id (loss False)."""
    src, tok = data
    assert (23, 4) in tok.encode_interleaved(*_segments(tok, 23)).placeholders
    spec = Interleaved(
        native=NativeResolution(min_pixels=28 * 28, max_pixels=56 * 56),
        tokenizer=tok,
        packing=Packing(length=24, window=8),
    )
    pad = spec.pad_id
    checked = False
    for batch in make_loader(src, batch_size=2, output=spec, label=None, num_workers=0):
        _check_image_tokens(batch, tok)
        for key, r in zip(batch["keys"], batch["sample_row"].tolist(), strict=True):
            if key == "doc023":
                starts = (batch["position_ids"][r] == 0).nonzero().flatten().tolist()
                at = [
                    s
                    for s in starts
                    if torch.equal(batch["input_ids"][r, s : s + 23], _expected(tok, 23)[:23])
                ]
                assert len(at) == 1 and batch["input_ids"][r, at[0] + 23] == pad
                assert not batch["loss_mask"][r, at[0] + 23]
                checked = True
    assert checked


def _split_loader(data, length: int, rank: int = 0, ws: int = 1, **kw: Any) -> Any:  # type: ignore[no-untyped-def]
    src, tok = data
    spec = Interleaved(
        native=NativeResolution(min_pixels=28 * 28, max_pixels=56 * 56),
        tokenizer=tok,
        packing=Packing(length=length, window=8, overflow="split"),
    )
    kw = {"num_workers": 0, "seed": 3, "label": None, **kw}
    return make_loader(src, batch_size=2, output=spec, rank=rank, world_size=ws, **kw)


Piece = tuple[torch.Tensor, list[tuple[int, int, tuple[int, int]]]]  # ids; (start, n, (h, w))


def _pieces(batch: dict[str, Any], tok: TextTokenizer, into: dict[str, list[Piece]]) -> None:
    """Each entry of ``batch`` (a sample, or a piece of one) as its ids and its images (run
    start in the entry, run length, image size), by key; every check of a batch on the way."""
    ids, pos, cu = batch["input_ids"], batch["position_ids"], batch["cu_seqlens"].tolist()
    B, L = ids.shape
    assert cu[0] == 0 and cu[-1] == B * L and all(b > a for a, b in itertools.pairwise(cu))
    _check_image_tokens(batch, tok)
    images = list(
        zip(
            batch["image_row"].tolist(),
            batch["image_spans"].tolist(),
            [tuple(im.shape[1:]) for im in split_images(batch)],
            strict=True,
        )
    )
    rows = batch["sample_row"].tolist()
    placed = 0
    for r in range(B):
        keys = [k for k, row in zip(batch["keys"], rows, strict=True) if row == r]
        bounds = [c - r * L for c in cu if r * L <= c <= (r + 1) * L]
        assert len(bounds) - 1 - len(keys) in (0, 1)  # its entries, then its padding
        if len(bounds) - 1 > len(keys):
            a = bounds[-2]
            assert (ids[r, a:] == _spec(tok).pad_id).all() and not batch["loss_mask"][r, a:].any()
        for key, (a, b) in zip(keys, itertools.pairwise(bounds), strict=False):
            assert torch.equal(pos[r, a:b], torch.arange(b - a)), key
            mine = [(s - a, n, hw) for row, (s, n), hw in images if row == r and a <= s < b]
            assert all(s + n <= b - a for s, n, _ in mine)
            placed += len(mine)
            into.setdefault(key, []).append((ids[r, a:b].clone(), mine))
    assert placed == len(images)  # every image in an entry of its row


def _tiling(tok: TextTokenizer, key: str, pieces: list[Piece], pad: int) -> list[int]:
    """The offsets at which ``pieces`` lay out sample ``key`` end to end, every token once:
    each piece the tokenizer's ids of the sample from its offset, a placeholder run a piece
    boundary cuts as the pad id (its image in no piece), each whole run's image in its piece.
    AssertionError where no order does; returns each piece's offset."""
    k = int(key[3:])
    enc = tok.encode_interleaved(*_segments(tok, k))
    rule = _spec(tok).native
    assert rule is not None
    sizes = [rule.size(30 + k, 40 + 11 * i) for i in range(k % 3)]
    runs = [(s, n, sizes[i]) for (s, n), i in zip(enc.placeholders, enc.images, strict=True)]
    want, total = enc.input_ids, len(enc.input_ids)

    def fits(piece: Piece, p: int) -> bool:
        got, imgs = piece
        q = p + len(got)
        if q > total:
            return False
        expect = want[p:q].clone()
        whole = []
        for s, n, hw in runs:
            if p <= s and s + n <= q:
                whole.append((s - p, n, hw))
            elif max(s, p) < min(s + n, q):
                expect[max(s, p) - p : min(s + n, q) - p] = pad
        return torch.equal(got, expect) and sorted(imgs) == sorted(whole)

    def place(p: int, left: list[int]) -> list[tuple[int, int]] | None:
        if p == total:
            return [] if not left else None
        for j in dict.fromkeys(left):  # pieces alike are interchangeable: try each once
            if fits(pieces[j], p):
                rest = place(p + len(pieces[j][0]), [x for x in left if x != j])
                if rest is not None:
                    return [(j, p), *rest]
        return None

    order = place(0, list(range(len(pieces))))
    assert order is not None, f"{key}: its {len(pieces)} pieces do not lay it out once"
    return [p for _j, p in sorted(order)]


def _cut_runs(tok: TextTokenizer, length: int, most: int | None = None) -> int:
    """Placeholder runs of the fixture's samples a piece boundary (a multiple of L) cuts
    (``most``: the images kept a sample, as ``Interleaved(max_images=...)``)."""
    cut = 0
    for k in range(SAMPLES):
        segments, counts = _segments(tok, k)
        if most is not None:
            segments = [s for s in segments if not isinstance(s, int) or s < most]
            counts = counts[:most]
        for s, n in tok.encode_interleaved(segments, counts).placeholders:
            cut += any(s < j * length < s + n for j in range(1, (s + n) // length + 1))
    return cut


@settings(max_examples=4, deadline=None)
@given(ws=st.integers(1, 3), workers=st.integers(0, 2), length=st.sampled_from([20, 24]))
def test_split_delivers_every_token_of_every_sample_once(data, ws, workers, length) -> None:  # type: ignore[no-untyped-def]
    """overflow="split": over the ranks, each sample's entries lay out its tokenizer ids end
    to end, every token once: pieces at 0, L, 2L, ..., all L tokens but the last, a run a
    boundary cuts as the pad id with its image in no piece, every other image in the piece of
    its run; image tokens always the delivered images' runs; equal steps on every rank."""
    _src, tok = data
    pad = _spec(tok).pad_id
    assert _cut_runs(tok, length)
    got: dict[str, list[Piece]] = {}
    steps = set()
    for rank in range(ws):
        loader = _split_loader(data, length, rank, ws, num_workers=workers)
        n = 0
        for batch in loader:
            assert batch["input_ids"].shape == (2, length)
            _pieces(batch, tok, got)
            n += 1
        assert n == len(loader)
        steps.add(n)
    assert len(steps) == 1
    assert sorted(got) == [f"doc{k:03d}" for k in range(SAMPLES)]
    split = 0
    for key, pieces in got.items():
        offsets = _tiling(tok, key, pieces, pad)
        assert sorted(offsets) == [j * length for j in range(len(pieces))], key
        split += len(pieces) > 1
    assert split >= 20


@pytest.mark.parametrize("most", [None, 1])
def test_split_counts_each_dropped_image_once(data, most) -> None:  # type: ignore[no-untyped-def]
    """An image whose run a piece boundary cuts is counted once in images_dropped (by the
    piece its run starts in), and one over ``max_images`` once (by the piece at token 0), not
    once per piece of its sample."""
    from wdstool.base import counters

    src, tok = data
    spec = Interleaved(
        native=NativeResolution(min_pixels=28 * 28, max_pixels=56 * 56),
        tokenizer=tok,
        max_images=most,
        packing=Packing(length=24, window=8, overflow="split"),
    )
    loader = make_loader(src, batch_size=2, output=spec, label=None, num_workers=0, stats=False)
    counters.take()
    for _batch in loader:
        pass
    cut = _cut_runs(tok, 24, most)
    over = 0 if most is None else sum(max(0, k % 3 - most) for k in range(SAMPLES))
    assert (cut if most is None else over) >= 1
    assert counters.take().get("images_dropped", 0) == cut + over


def test_split_warns_of_the_pieces(data, caplog) -> None:  # type: ignore[no-untyped-def]
    _src, tok = data
    with caplog.at_level("WARNING", logger="loaders.kinds.packed"):
        _split_loader(data, 24)
    long = sum(1 for k in range(SAMPLES) if len(_expected(tok, k)) > 24)
    assert f"{long} of {SAMPLES} samples" in caplog.text
    assert "will be split into pieces of at most 24 tokens (overflow='split')" in caplog.text


@pytest.mark.parametrize(("before", "after"), [((1, 0), (1, 2)), ((2, 1), (3, 0))])
def test_split_resumed_on_other_workers_delivers_the_rest_once(data, before, after) -> None:  # type: ignore[no-untyped-def]
    """A mid-epoch state (some samples' pieces delivered, others not) resumed with another
    world size or worker count: the batches before and after lay out every sample once."""
    _src, tok = data
    pad = _spec(tok).pad_id
    ws, workers = before
    first: dict[str, list[Piece]] = {}
    states = []
    for rank in range(ws):
        loader = _split_loader(data, 20, rank, ws, num_workers=workers)
        it = iter(loader)
        for _ in range(3):
            _pieces(next(it), tok, first)
        states.append(loader.state_dict())
    rest: dict[str, list[Piece]] = {}
    ws, workers = after
    steps = set()
    for rank in range(ws):
        loader = _split_loader(data, 20, rank, ws, num_workers=workers)
        loader.load_state_dict(states[0])
        n = 0
        for batch in loader:
            _pieces(batch, tok, rest)
            n += 1
        assert n == len(loader) - loader.start_batch
        steps.add(n)
    assert len(steps) == 1
    across = [k for k in first if k in rest]
    assert across  # a sample split across the interruption: resumed at its undelivered offset
    keys = sorted(set(first) | set(rest))
    assert keys == [f"doc{k:03d}" for k in range(SAMPLES)]
    for key in keys:
        _tiling(tok, key, first.get(key, []) + rest.get(key, []), pad)


def test_mean_tokens_by_overflow() -> None:
    """What a sample puts in the batches, for weights in tokens: its length cut to L
    (truncate), all of it (split: every piece is delivered) or nothing (drop)."""
    import numpy as np

    from loaders.kinds.packed import mean_tokens

    lengths = np.array([4, 10, 30])
    got = [
        mean_tokens(lengths, Packing(length=8, overflow=o)) for o in ("truncate", "split", "drop")
    ]
    assert got == [(4 + 8 + 8) / 3, (4 + 10 + 30) / 3, 4 / 3]


@pytest.mark.slow
def test_over_http_workers_sharing_a_window_fetch_each_byte_once(data, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two workers share each window (its batches are dealt in turn): from a web server each
    asks only for the samples of its own batches, a ranged read from each run's offset (the
    index gives them), so the tars are fetched about once between them; the batches are those
    read from the local disk."""
    from pathlib import Path

    from tests.support.webserver import WebServer
    from wdstool.format.tar_index import scan_shard

    src, tok = data
    folder = Path(src).parent
    shards = sorted(folder.glob("docs-*.tar"))
    entries = []
    for p in shards:
        with open(p, "rb") as f:
            scan = scan_shard(f, p.name)
        entries.append({"url": p.name, "nsamples": scan.nsamples,
                        "filesize": p.stat().st_size, "offsets": list(scan.offsets)})  # fmt: skip
    (folder / "docs.json").write_text(json.dumps({"shardlist": entries}))
    total = sum(p.stat().st_size for p in shards)
    local = [(tuple(_rows(b)), b["input_ids"]) for b in _loader(data, num_workers=2)]
    with WebServer(folder) as srv:
        kw = {"num_workers": 2, "seed": 3, "label": None}
        loader = make_loader(f"{srv.url}/docs.json", batch_size=2, output=_spec(tok), **kw)
        before = srv.total_sent(".tar")  # make_loader read the samples' lengths once
        remote = [(tuple(_rows(b)), b["input_ids"]) for b in loader]
        fetched = srv.total_sent(".tar") - before
    assert [r for r, _ in remote] == [r for r, _ in local]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(remote, local, strict=True))
    assert fetched <= 1.05 * total, fetched / total  # both workers reading it all: ~2x
