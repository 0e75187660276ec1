"""Conversations rendered by the model's own chat template: the ids are transformers'
``apply_chat_template(..., tokenize=True)``'s, the assistant-only mask is its
``return_assistant_tokens_mask`` where the template marks the replies with {% generation %},
and the same mask where it does not (found turn by turn), for a ChatML and a Llama-3-style
template; images expanded to their runs; a template that rewrites earlier turns is refused at
the call."""

from __future__ import annotations

from pathlib import Path

import pytest

from loaders import Chat, Interleaved, TextTokenizer
from loaders.text.chat import renderer_for
from tests.support.tokenizers_local import chat_folder, image_token
from wdstool.base.errors import ConfigError, SampleError

pytest.importorskip("transformers")


def _text(t: str) -> dict:
    return {"type": "text", "text": t}


IMAGE = {"type": "image", "image": "0.jpg"}
CONVERSATIONS = [
    [  # LLaVA-like: an image, then two turns
        {"role": "user", "content": [IMAGE, _text("\nWhat is on the table?")]},
        {"role": "assistant", "content": [_text("A cup of coffee.")]},
        {"role": "user", "content": [_text("And the cat?")]},
        {"role": "assistant", "content": [_text("It sits next to it, looking at the camera.")]},
    ],
    [  # text only, a system prompt
        {"role": "system", "content": [_text("You are a helpful assistant.")]},
        {"role": "user", "content": [_text("Name a river.")]},
        {"role": "assistant", "content": [_text("The quiet river under the old bridge.")]},
    ],
    [  # two images in one turn
        {
            "role": "user",
            "content": [IMAGE, _text(" and "), {"type": "image", "image": "1.jpg"}, _text("?")],
        },
        {"role": "assistant", "content": [_text("Two dogs, and a red bicycle.")]},
    ],
]


def _hf(messages: list[dict]) -> list[dict]:
    return [
        {
            "role": m["role"],
            "content": [{"type": "image"} if p["type"] == "image" else p for p in m["content"]],
        }
        for m in messages
    ]


@pytest.fixture(scope="module", params=["chatml", "llama3"])
def style(request) -> str:  # type: ignore[no-untyped-def]
    return request.param


@pytest.fixture(scope="module")
def folders(style: str, tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    root = tmp_path_factory.mktemp(f"chat-{style}")
    return {g: chat_folder(root / f"gen-{g}", style, g) for g in (True, False)}


def _images(messages: list[dict]) -> int:
    return sum(p["type"] == "image" for m in messages for p in m["content"])


@pytest.mark.parametrize("generation", [True, False], ids=["generation", "turn-by-turn"])
def test_ids_and_assistant_mask_equal_transformers(style: str, folders, generation) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    marked = AutoTokenizer.from_pretrained(str(folders[True]), local_files_only=True)
    tok = TextTokenizer(str(folders[generation]), image_token=image_token(style))
    renderer = renderer_for(tok, Chat())
    for messages in CONVERSATIONS:
        want = marked.apply_chat_template(
            _hf(messages), tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        got = renderer.encode(messages, [1] * _images(messages), "a test")
        assert got.ids.tolist() == list(want["input_ids"])
        assert got.mask.tolist() == [bool(m) for m in want["assistant_masks"]]
        assert any(got.mask) and not all(got.mask)


def test_image_runs_last_turn_and_every_token(style: str, folders) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(folders[True]), local_files_only=True)
    tok = TextTokenizer(str(folders[False]), image_token=image_token(style))
    messages = CONVERSATIONS[2]
    one = renderer_for(tok, Chat()).encode(messages, [1, 1], "a test")
    got = renderer_for(tok, Chat()).encode(messages, [4, 7], "a test")
    # each placeholder becomes its image's run; the rest is the template's own ids
    (a, _), (b, _) = got.runs
    assert got.runs == [(a, 4), (b, 7)] and one.runs == [(a, 1), (b - 3, 1)]
    assert got.ids[a : a + 4].tolist() == [tok.image_token_id] * 4 and not any(got.mask[a : a + 4])
    assert [i for t, i in enumerate(got.ids.tolist()) if not (a < t < a + 4 or b < t < b + 7)] == (
        one.ids.tolist()
    )
    assert one.ids.tolist() == list(
        hf.apply_chat_template(_hf(messages), tokenize=True)["input_ids"]
    )
    # the last reply only; every token but the images' placeholders
    first = CONVERSATIONS[0]
    both = renderer_for(tok, Chat()).encode(first, [3], "a test").mask.tolist()
    last = renderer_for(tok, Chat(loss="last")).encode(first, [3], "a test").mask.tolist()
    every = renderer_for(tok, Chat(loss="all")).encode(first, [3], "a test")
    assert sum(last) < sum(both) and all(b for b, x in zip(both, last, strict=True) if x)
    assert last[len(last) - sum(last) - (1 if style == "chatml" else 0) :].count(True) == sum(last)
    ((c, n),) = every.runs
    assert every.mask.tolist() == [not c <= t < c + n for t in range(len(every.ids))]


def test_a_template_without_the_images_placeholder_is_named(style: str, folders) -> None:  # type: ignore[no-untyped-def]
    tok = TextTokenizer(str(folders[False]), image_token="<image>" if style == "chatml" else None)
    if style == "llama3":  # no image token at all: Interleaved refuses it already
        with pytest.raises(ConfigError, match="image_token"):
            Interleaved(tokenizer=tok, chat=Chat())
        return
    renderer = renderer_for(tok, Chat())
    with pytest.raises(SampleError, match=r"wrote 0 image placeholder\(s\) for 1 image"):
        renderer.encode(CONVERSATIONS[0], [1], "s3://b/x.tar: sample 'k'")


def test_templates_refused_at_the_call(folders, style: str) -> None:  # type: ignore[no-untyped-def]
    tok = TextTokenizer(str(folders[False]), image_token=image_token(style))
    # rewrites earlier turns (the last user turn rendered in capitals): no prefix per turn
    rewrite = (
        "{% for m in messages %}{% if loop.last %}{{ m['content'][0]['text'] | upper }}"
        "{% else %}{{ m['role'] }}: {{ m['content'][0]['text'] }}\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    with pytest.raises(ConfigError, match=r"turn \d+ as a prefix of the whole"):
        Interleaved(tokenizer=tok, chat=Chat(template=rewrite))
    Interleaved(tokenizer=tok, chat=Chat(template=rewrite, loss="all"))  # no replies to find
    plain = TextTokenizer(
        str(Path(folders[False]) / "tokenizer.json"), image_token=image_token(style)
    )
    with pytest.raises(ConfigError, match="has no chat template; give one as Chat"):
        Interleaved(tokenizer=plain, chat=Chat())
    with pytest.raises(ConfigError, match="Chat: loss is one of assistant, last, all"):
        Chat(loss="user")
