"""The tokenizer in the loader's workers: built once per process however many samples it
encodes, carried to spawned workers as settings (never the tokenizer), and a CLIP-style job
over real shards with no class of the user's."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

from loaders import TextTokenizer, make_loader
from loaders.text.process_cache import load_count
from tests.conftest import REPO
from tests.loaders.text.conftest import CAPTIONS
from tests.support.tokenizers_local import CountingFields, train_tokenizer


def test_built_once_per_process_not_per_sample(tokenizer_json, bpe) -> None:
    fresh = train_tokenizer(extra=["a tokenizer no other test builds"])
    tok = TextTokenizer(fresh, image_token="<image>")
    assert load_count(tok.fingerprint) == 1  # built where it was made: bad settings fail there
    fn = tok.fields("caption")
    for caption in CAPTIONS * 20:
        tok.encode(caption)
        tok.encode_interleaved([caption, 0], [2])
        fn({"caption": caption})
    again = TextTokenizer(fresh, max_length=16)  # other options, the same tokenizer
    again.encode(CAPTIONS[0])
    assert load_count(tok.fingerprint) == 1


def _classes(data: bytes) -> set[str]:
    """The classes a pickle names."""
    found = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            found.add(f"{module}.{name}")
            return super().find_class(module, name)

    Recording(io.BytesIO(data)).load()
    return found


def test_pickling_carries_settings_not_the_tokenizer(tokenizer_json, bpe) -> None:
    tok = TextTokenizer(tokenizer_json, image_token="<image>", max_length=20)
    data = pickle.dumps(tok.fields("caption"))
    assert len(data) < 2_000  # the path and the digest, not a vocabulary
    assert pickle.loads(data).tokenizer == tok
    settings = {
        "loaders.text.tokenizer.TextTokenizer",
        "loaders.text.resolve.Carried",
        "loaders.text.fields.TokenizeField",
    }
    assert _classes(data) == settings
    from_object = pickle.dumps(TextTokenizer(bpe))  # an object: its JSON, as a str
    assert _classes(from_object) == settings - {"loaders.text.fields.TokenizeField"}


def test_a_fresh_process_builds_it_once(tokenizer_json, tmp_path) -> None:
    tok = TextTokenizer(tokenizer_json, max_length=20)
    (tmp_path / "settings.pkl").write_bytes(pickle.dumps(tok))
    script = textwrap.dedent(
        f"""
        import pickle, sys
        from loaders.text.process_cache import load_count
        tok = pickle.loads(open({str(tmp_path / "settings.pkl")!r}, "rb").read())
        before = load_count(tok.fingerprint)
        ids = [tok.encode(line) for line in sys.stdin.read().splitlines()]
        print(before, load_count(tok.fingerprint), len(ids), ids[0])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        input="\n".join(CAPTIONS * 5),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout.split(maxsplit=3)
    assert out[:3] == ["0", "1", str(len(CAPTIONS) * 5)]
    assert out[3].strip() == str(tok.encode(CAPTIONS[0]))


def _epoch(loader) -> list[dict]:
    return list(loader)


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.full)])
def test_a_clip_job_with_two_worker_processes(caption_shards, tokenizer_json, bpe, context) -> None:
    tok = TextTokenizer(tokenizer_json, max_length=24)
    loader = make_loader(
        str(caption_shards),
        batch_size=4,
        label=None,
        fields={"caption": "txt"},
        fields_fn=CountingFields(tok, "caption"),
        pad_fields={"input_ids": tok.pad_id},
        image_size=32,
        num_workers=2,
        multiprocessing_context=context,
        seed=1,
    )
    batches = _epoch(loader)
    assert len(batches) == 6
    own = {i: bpe.encode(c).ids for i, c in enumerate(CAPTIONS)}
    pids, seen = set(), set()
    for b in batches:
        ids, lengths, mask = b["input_ids"], b["input_ids_lengths"], b["input_ids_mask"]
        assert ids.dtype == torch.int64 and ids.shape[0] == 4
        assert bool((ids[~mask] == tok.pad_id).all())
        assert "caption" not in b  # replaced by its ids
        for row, key, n in zip(ids, b["keys"], lengths.tolist(), strict=True):
            want = (
                own[int(key)][:23] + own[int(key)][-1:]
                if len(own[int(key)]) > 24
                else own[int(key)]
            )
            assert row[:n].tolist() == want
            seen.add(key)
        pids.update(b["pid"])
        assert set(b["loads"]) == {1}  # each worker built it once (forked: inherited, built here)
    assert len(seen) == len(CAPTIONS)
    assert len(pids) == 2 and os.getpid() not in pids


def test_decode_threads_share_the_process_s_tokenizer(caption_shards, tokenizer_json) -> None:
    tok = TextTokenizer(tokenizer_json)
    loader = make_loader(
        str(caption_shards),
        batch_size=8,
        label=None,
        fields={"caption": "txt"},
        fields_fn=CountingFields(tok, "caption"),
        pad_fields={"input_ids": tok.pad_id},
        image_size=32,
        num_workers=2,
        worker_mode="thread",
    )
    batches = _epoch(loader)
    assert {p for b in batches for p in b["pid"]} == {os.getpid()}
    assert {n for b in batches for n in b["loads"]} == {load_count(tok.fingerprint)}


def test_a_sample_without_its_caption_is_a_bad_sample(tokenizer_json) -> None:
    fn = TextTokenizer(tokenizer_json).fields("caption", to="tokens", keep=True)
    out = fn({"caption": "A cat.", "url": "u"})
    assert out["caption"] == "A cat." and out["url"] == "u" and out["tokens"].dtype == torch.int64
    with pytest.raises(ValueError, match="'caption' is NoneType, not text"):
        fn({"caption": None})
