"""TextTokenizer: what it is given, the ids it gives (the tokenizer's own), and bad settings as
one-line ConfigErrors where it is made."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path

import pytest

from loaders import TextTokenizer
from tests.loaders.text.conftest import CAPTIONS
from tests.support.tokenizers_local import fast_tokenizer, train_tokenizer
from wdstool.base.errors import ConfigError

TEXTS = [*CAPTIONS[:8], "", "  spaces   and\ttabs\n", "naïve café ☕ 東京", "<s> literal </s>"]


@pytest.fixture(params=["json", "folder", "tokenizers", "transformers"])
def given(request, bpe, tokenizer_json, tokenizer_folder):
    """Each form TextTokenizer takes, over the same tokenizer."""
    return {
        "json": lambda: str(tokenizer_json),
        "folder": lambda: tokenizer_folder,
        "tokenizers": lambda: bpe,
        "transformers": lambda: fast_tokenizer(bpe),
    }[request.param]()


def test_encode_is_the_tokenizers_own_output(given, bpe, tokenizer_folder) -> None:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tokenizer_folder), local_files_only=True)
    tok = TextTokenizer(given)
    bare = TextTokenizer(given, add_special_tokens=False)
    for text in TEXTS:
        assert tok.encode(text) == bpe.encode(text).ids == hf(text)["input_ids"]
        assert bare.encode(text) == bpe.encode(text, add_special_tokens=False).ids
    assert tok.encode("a cat")[0] == bpe.token_to_id("<s>")
    assert tok.encode("a cat")[-1] == bpe.token_to_id("</s>")
    assert tok.pad_id == bpe.token_to_id("<pad>")
    assert tok.vocab_size == bpe.get_vocab_size(with_added_tokens=True)


@pytest.mark.parametrize("max_length", [3, 5, 12, 40])
def test_max_length_cuts_as_the_tokenizers_truncation(tokenizer_json, max_length) -> None:
    from tokenizers import Tokenizer

    own = Tokenizer.from_file(str(tokenizer_json))
    own.no_padding()
    own.enable_truncation(max_length)
    tok = TextTokenizer(tokenizer_json, max_length=max_length)
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == own.encode(text).ids
        assert len(ids) <= max_length


@pytest.mark.parametrize("processor", ["bert", "roberta", "none", "bos-only"])
def test_other_post_processors(processor) -> None:
    """Special tokens are whatever the post-processor puts around one sequence."""
    from tokenizers import processors

    bpe = train_tokenizer()
    ids = {t: bpe.token_to_id(t) for t in ("<s>", "</s>")}
    bpe.post_processor = {
        "bert": processors.BertProcessing(("</s>", ids["</s>"]), ("<s>", ids["<s>"])),
        "roberta": processors.RobertaProcessing(("</s>", ids["</s>"]), ("<s>", ids["<s>"])),
        "none": None,
        "bos-only": processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", ids["<s>"])]
        ),
    }[processor]
    tok = TextTokenizer(bpe, max_length=9)
    own = TextTokenizer(bpe)
    bpe.no_padding()
    for text in TEXTS:
        assert own.encode(text) == bpe.encode(text).ids
    bpe.enable_truncation(9)
    for text in TEXTS:
        assert tok.encode(text) == bpe.encode(text).ids


def test_settings_are_values(tokenizer_json, bpe) -> None:
    a = TextTokenizer(tokenizer_json, max_length=8, image_token="<image>")
    assert a == TextTokenizer(str(tokenizer_json), max_length=8, image_token="<image>")
    assert a != TextTokenizer(tokenizer_json, max_length=9, image_token="<image>")
    assert a.fingerprint == TextTokenizer(str(tokenizer_json)).fingerprint  # options aside
    assert a.fingerprint != TextTokenizer(train_tokenizer(extra=["zebra zebra"])).fingerprint
    assert a.image_token_id == bpe.token_to_id("<image>")
    assert "tokenizer.json" in repr(a) and "max_length=8" in repr(a)


# --- bad settings: one line, at construction -------------------------------------------------
def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_a_missing_file_names_it(tmp_path) -> None:
    with pytest.raises(ConfigError) as exc:
        TextTokenizer(tmp_path / "nope.json")
    assert str(tmp_path / "nope.json") in _one_line(exc)


@pytest.mark.parametrize(
    ("content", "says"),
    [("{not json", "is not JSON"), ('{"version": "1.0"}', "not a tokenizers JSON file")],
)
def test_unreadable_json_names_the_file(tmp_path, content, says) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=says) as exc:
        TextTokenizer(path)
    assert str(path) in _one_line(exc)


def test_an_image_token_not_in_the_vocabulary(tokenizer_json) -> None:
    with pytest.raises(
        ConfigError, match=r"'<img>' is not in .*tokenizer.json's vocabulary"
    ) as exc:
        TextTokenizer(tokenizer_json, image_token="<img>")
    assert "add_special_tokens" in _one_line(exc)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"max_length": 0}, "max_length must be a positive int"),
        ({"max_length": True}, "max_length must be a positive int"),
        ({"max_length": 2}, "leaves no room for text beside the 2 special tokens"),
        ({"add_special_tokens": "yes"}, "add_special_tokens must be True or False"),
        ({"image_token": ""}, "image_token must be a token"),
    ],
)
def test_bad_options(tokenizer_json, kwargs, says) -> None:
    with pytest.raises(ConfigError, match=says) as exc:
        TextTokenizer(tokenizer_json, **kwargs)
    _one_line(exc)


def test_not_a_tokenizer_folder(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a transformers tokenizer folder") as exc:
        TextTokenizer(tmp_path / "empty")
    assert str(tmp_path / "empty") in _one_line(exc)


def test_a_slow_transformers_tokenizer_asks_for_a_fast_one(tmp_path) -> None:
    from transformers import ByT5Tokenizer

    slow = ByT5Tokenizer()
    with pytest.raises(ConfigError, match=r"slow .* give a fast one") as exc:
        TextTokenizer(slow)
    _one_line(exc)
    slow.save_pretrained(str(tmp_path / "slow"))
    with pytest.raises(ConfigError, match="slow") as exc:
        TextTokenizer(tmp_path / "slow")
    assert str(tmp_path / "slow") in _one_line(exc)


def test_something_else_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"takes a tokenizer.json path.* not int"):
        TextTokenizer(3)


def test_without_tokenizers_it_names_the_extra(tokenizer_json, monkeypatch) -> None:
    real_import = builtins.__import__

    def no_tokenizers(name, *args, **kwargs):
        if name == "tokenizers" or name.startswith("tokenizers."):
            raise ImportError("No module named 'tokenizers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "tokenizers", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_tokenizers)
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[text\]'") as exc:
        TextTokenizer(tokenizer_json)
    _one_line(exc)


def test_a_file_changed_after_the_settings_were_made(tmp_path, bpe) -> None:
    """A process building the tokenizer from a file checks it is the file the settings read."""
    from loaders.text.resolve import build

    path = tmp_path / "tokenizer.json"
    bpe.save(str(path))
    tok = TextTokenizer(path)
    Path(path).write_text(train_tokenizer(extra=["zebra zebra zebra"]).to_str())
    with pytest.raises(ConfigError, match="changed since the TextTokenizer was made"):
        build(tok._carried)
