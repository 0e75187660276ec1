"""encode_interleaved: text and images in one sequence, placeholders where the images are, the
special tokens once around the whole, and a max_length cut that never halves an image's run."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders import TextTokenizer
from wdstool.base.errors import ConfigError


@pytest.fixture(scope="module")
def tok(tokenizer_json):
    return TextTokenizer(tokenizer_json, image_token="<image>")


def _text(bpe, text: str) -> list[int]:
    return bpe.encode(text, add_special_tokens=False).ids


def test_placeholders_at_the_right_places(tok, bpe) -> None:
    segments = ["A cat on a table.", 0, "Two dogs run along the beach", 1, "at sunset."]
    enc = tok.encode_interleaved(segments, [3, 5])
    img, bos, eos = (bpe.token_to_id(t) for t in ("<image>", "<s>", "</s>"))
    a, b, c = (_text(bpe, s) for s in segments[::2])
    want = [bos, *a, *[img] * 3, *b, *[img] * 5, *c, eos]
    assert isinstance(enc.input_ids, torch.Tensor) and enc.input_ids.dtype == torch.int64
    assert enc.input_ids.tolist() == want
    assert enc.length == len(want)
    assert enc.images == (0, 1)
    assert enc.placeholders == ((1 + len(a), 3), (1 + len(a) + 3 + len(b), 5))
    for start, n in enc.placeholders:
        assert enc.input_ids[start : start + n].tolist() == [img] * n
    assert int((enc.input_ids == img).sum()) == 8
    assert enc.images_dropped == 0


def test_text_only_is_encode(tok) -> None:
    text = "A red bicycle leans against a brick wall."
    enc = tok.encode_interleaved([text], [], tensors=False)
    assert enc.input_ids == tok.encode(text)
    assert enc.placeholders == () and enc.images == ()


def test_images_first_and_in_any_order(tok, bpe) -> None:
    """LLaVA's order (images, then the prompt), and images out of index order."""
    enc = tok.encode_interleaved([1, 0, "Describe both."], [2, 4], tensors=False)
    assert enc.images == (1, 0)
    assert enc.placeholders == ((1, 4), (5, 2))
    assert enc.input_ids[:7] == [bpe.token_to_id("<s>"), *[bpe.token_to_id("<image>")] * 6]


def test_without_special_tokens(tokenizer_json, bpe) -> None:
    tok = TextTokenizer(tokenizer_json, image_token="<image>", add_special_tokens=False)
    enc = tok.encode_interleaved(["A cat", 0], [2], tensors=False)
    assert enc.input_ids == [*_text(bpe, "A cat"), *[tok.image_token_id] * 2]
    assert enc.placeholders == ((len(_text(bpe, "A cat")), 2),)


def test_the_cut_stops_before_an_image_that_does_not_fit(tokenizer_json, bpe) -> None:
    a = _text(bpe, "A cat on a table.")
    # room for bos + a + 3 image tokens + eos, not for the second image's 5
    tok = TextTokenizer(tokenizer_json, image_token="<image>", max_length=len(a) + 3 + 2 + 4)
    enc = tok.encode_interleaved(["A cat on a table.", 0, 1, "The end.", 2], [3, 5, 1])
    assert enc.images == (0,)
    assert enc.images_dropped == 2
    assert enc.input_ids.tolist()[-1] == bpe.token_to_id("</s>")
    assert enc.length == len(a) + 3 + 2  # ends before image 1: the 4 tokens left stay unused


segment_lists = st.lists(
    st.one_of(
        st.sampled_from(["A cat.", "Two dogs run along the beach at sunset.", "", "x"]), st.none()
    ),  # None: the next image
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(
    shape=segment_lists,
    counts=st.lists(st.integers(1, 6), min_size=8, max_size=8),
    max_length=st.one_of(st.none(), st.integers(3, 40)),
)
def test_a_cut_never_halves_a_placeholder_run(tokenizer_json, shape, counts, max_length) -> None:
    tok = TextTokenizer(tokenizer_json, image_token="<image>", max_length=max_length)
    full = TextTokenizer(tokenizer_json, image_token="<image>")
    images = iter(range(8))
    segments = [next(images) if s is None else s for s in shape]
    n_images = sum(1 for s in segments if not isinstance(s, str))
    image_tokens = counts[:n_images]
    enc = tok.encode_interleaved(segments, image_tokens, tensors=False)
    whole = full.encode_interleaved(segments, image_tokens, tensors=False)
    img = tok.image_token_id
    if max_length is not None:
        assert enc.length <= max_length
    assert len(enc.images) + enc.images_dropped == n_images
    # the cut sample is the whole one cut: its content a prefix, the same runs for its images
    assert enc.input_ids[:-1] == whole.input_ids[: enc.length - 1]
    assert enc.placeholders == whole.placeholders[: len(enc.images)]
    assert sum(1 for i in enc.input_ids if i == img) == sum(n for _s, n in enc.placeholders)
    for image, (start, n) in zip(enc.images, enc.placeholders, strict=True):
        assert n == image_tokens[image]
        assert enc.input_ids[start : start + n] == [img] * n


@pytest.mark.parametrize(
    ("segments", "image_tokens", "says"),
    [
        (["a", 2], [1, 1], "segment image 2 has no image_tokens entry"),
        (["a", 0, 0], [1], "image 0 appears twice"),
        (["a", 0], [1, 1], r"images \[1\] have image_tokens but no place"),
        (["a", 0], [0], "image_tokens must be positive ints"),
        (["a", 1.5], [1, 1], "a segment is float"),
        ("a cat", [], "segments must be a list"),
    ],
)
def test_segments_that_do_not_match(tok, segments, image_tokens, says) -> None:
    with pytest.raises(ValueError, match=says):
        tok.encode_interleaved(segments, image_tokens)


def test_images_need_an_image_token(tokenizer_json) -> None:
    with pytest.raises(ConfigError, match="needs image_token="):
        TextTokenizer(tokenizer_json).encode_interleaved(["a", 0], [1])
