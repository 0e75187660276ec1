"""The vision-language examples as a user runs them, under real torchrun on the CPU (gloo) with a
real BPE tokenizer: examples/vlm_packed_train.py on shards that ``wdstool pack`` wrote from a
JSON Lines listing (every sample once per epoch over the ranks, equal steps, a resume on
another number of ranks covering the epoch exactly once), and examples/clip_train.py with
``--tokenizer``."""

from __future__ import annotations

import io
import json
import math
import subprocess
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO, jpeg_bytes, run_cli
from tests.loaders.conftest import shard_keys
from tests.support.interleaved import obelics_rows, write_rows
from tests.support.tokenizers_local import save_json
from tests.support.torchrun import torchrun_env, train_ddp_cmd

pytestmark = pytest.mark.slow
DOCS = 40  # 1 to 3 images each: about 3 packed batches of 2 rows of 128 tokens per rank


@pytest.fixture(scope="module")
def vl(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """(shards, tokenizer.json, every key): OBELICS-style documents packed by the CLI."""
    root = tmp_path_factory.mktemp("vl")
    listing = write_rows(root / "docs.jsonl", obelics_rows(root, DOCS))
    run_cli("pack", str(listing), str(root / "shards"), "--max-count", "8", "-q")
    keys = [k for shard in shard_keys(root / "shards") for k in shard]
    assert len(keys) == DOCS
    return root / "shards", save_json(root / "tokenizer.json"), keys


def _run(nproc: int, script: str, *args: str) -> str:
    cmd = train_ddp_cmd(nproc, *args, script=script)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=240, cwd=REPO, env=torchrun_env()
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def _packed(nproc: int, vl: tuple[Path, Path, list[str]], tmp: Path, *args: str) -> str:
    shards, tokenizer, _ = vl
    return _run(
        nproc,
        "vlm_packed_train.py",
        *("--shards", str(shards), "--tokenizer", str(tokenizer), "--length", "128"),
        *("--batch-size", "2", "--workers", "1", "--cache-dir", str(tmp / "cache")),
        *args,
    )


def _steps(log: Path, ranks: int) -> list[list[dict]]:
    """Each rank's logged steps (epoch, step, keys, loss)."""
    return [
        [json.loads(line) for line in (log / f"rank{r}.jsonl").read_text().splitlines()]
        for r in range(ranks)
    ]


def _keys(logs: list[list[dict]], epoch: int) -> Counter[str]:
    return Counter(k for rank in logs for s in rank if s["epoch"] == epoch for k in s["keys"])


@pytest.mark.full
def test_packed_vlm_job_stopped_then_resumed_on_two_ranks(vl, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """1 rank stops after its checkpoint at step 2; the job resumed on 2 ranks delivers the
    rest of that epoch (every sample not yet seen, once, equal steps on both ranks), then a
    whole epoch: the same number of steps on both ranks, every sample once over the ranks, in
    another order than the first epoch, and a finite loss."""
    ckpt = ["--checkpoint", str(tmp_path / "ckpt"), "--save-every", "2"]
    _packed(1, vl, tmp_path, *ckpt, "--max-steps", "2", "--keys-out", str(tmp_path / "a"))
    out = _packed(
        2, vl, tmp_path, *ckpt, "--resume", "--epochs", "2", "--keys-out", str(tmp_path / "b")
    )
    assert "resumed at step 2 of a 1-rank run" in out
    (before,) = _steps(tmp_path / "a", 1)
    after = _steps(tmp_path / "b", 2)
    assert [s["step"] for s in before] == [1, 2] and {s["epoch"] for s in before} == {0}
    rest = [sum(1 for s in rank if s["epoch"] == 0) for rank in after]
    assert rest[0] == rest[1] >= 1, rest  # equal steps on the new topology
    assert _keys([before], 0) + _keys(after, 0) == Counter(vl[2])
    assert _keys(after, 1) == Counter(vl[2])  # the next epoch: each key exactly once
    steps = [sum(1 for s in rank if s["epoch"] == 1) for rank in after]
    assert steps[0] == steps[1] >= 2, steps
    assert f"epoch 1: {steps[0]} steps a rank" in out
    assert f" tokens, {DOCS} samples, mean loss " in out
    assert all(math.isfinite(s["loss"]) for rank in [before, *after] for s in rank)
    first = [k for s in before for k in s["keys"]] + [
        k for s in after[0] if s["epoch"] == 0 for k in s["keys"]
    ]
    second = [k for s in after[0] if s["epoch"] == 1 for k in s["keys"]]
    assert first[: len(second)] != second[: len(first)]  # another order the second epoch


@pytest.mark.full
def test_clip_job_with_a_real_tokenizer_on_two_ranks(vl, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """examples/clip_train.py --tokenizer: every caption is the tokenizer's ids, padded with its
    pad id to the batch's longest; both ranks take the same steps of distinct samples."""
    from loaders import TextTokenizer

    shards = tmp_path / "shards"
    shards.mkdir()
    captions = {}
    for s in range(3):
        with tarfile.open(shards / f"part-{s:05d}.tar", "w") as tar:
            for i in range(6 * s, 6 * s + 6):
                key, captions[f"{i:06d}"] = f"{i:06d}", f"a photo of {i} cats on a wooden table"
                for ext, data in (("jpg", jpeg_bytes(i)), ("txt", captions[key].encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    out = tmp_path / "report"
    args = ["--data", str(shards), "--device", "cpu", "--epochs", "1", "--batch-size", "4"]
    args += ["--image-size", "32", "--workers", "1", "--tokenizer", str(vl[1]), "--out", str(out)]
    assert "mean loss" in _run(2, "clip_train.py", *args)
    tok = TextTokenizer(str(vl[1]), max_length=77)
    reports = [json.loads((out / f"rank{r}.json").read_text())["epochs"][0] for r in range(2)]
    assert reports[0]["steps"] == reports[1]["steps"] == 2  # 9 samples a rank, full batches of 4
    keys = [k for r in reports for k in r["keys"]]
    assert len(set(keys)) == len(keys) == 16 and set(keys) <= set(captions)
    for r in reports:
        for key, ids in zip(r["keys"], r["ids"], strict=True):
            want = tok.encode(captions[key])
            assert ids[: len(want)] == want and set(ids[len(want) :]) <= {tok.pad_id}


@pytest.mark.full
def test_sft_job_on_conversations_with_text_only_rows_resumed_on_two_ranks(tmp_path: Path) -> None:
    """examples/vlm_sft_train.py on LLaVA-Instruct-like conversations (a third of them text
    only) with a ChatML tokenizer saved with its template: 1 rank stops after its checkpoint
    at step 2, the job resumed on 2 ranks (DDP, gloo) finishes the epoch: every conversation
    once, equal steps on both ranks, batches without an image among them, the loss on the
    replies only (fewer tokens in the loss than in the rows), a finite loss."""
    from tests.support.interleaved import conversation_rows
    from tests.support.tokenizers_local import chat_folder

    listing = write_rows(tmp_path / "llava.json", conversation_rows(tmp_path, 24))
    run_cli("pack", str(listing), str(tmp_path / "shards"), "--max-count", "8", "-q")
    tok = chat_folder(tmp_path / "tok", "chatml", generation=False)
    args = [
        *("--shards", str(tmp_path / "shards"), "--tokenizer", str(tok)),
        *("--image-token", "<|image_pad|>", "--length", "96", "--batch-size", "2"),
        *("--workers", "1", "--cache-dir", str(tmp_path / "cache"), "--epochs", "1"),
        *("--checkpoint", str(tmp_path / "ckpt"), "--save-every", "2"),
    ]
    _run(1, "vlm_sft_train.py", *args, "--max-steps", "2", "--keys-out", str(tmp_path / "a"))
    out = _run(2, "vlm_sft_train.py", *args, "--resume", "--keys-out", str(tmp_path / "b"))
    assert "resumed at step 2 of a 1-rank run" in out
    first, rest = _steps(tmp_path / "a", 1), _steps(tmp_path / "b", 2)
    assert len(rest[0]) == len(rest[1]) > 0  # equal steps on both ranks
    seen = _keys(first, 0) + _keys(rest, 0)
    assert sorted(seen) == sorted(r["id"] for r in json.loads(listing.read_text()))
    assert set(seen.values()) == {1}
    steps = [s for r in first + rest for s in r]
    assert any(s["images"] == 0 for s in steps) and any(s["images"] for s in steps)
    assert all(0 < s["loss_tokens"] < 2 * 96 for s in steps if s["keys"])
    assert all(math.isfinite(s["loss"]) for s in steps)


def test_a_tiny_qwen2_vl_fine_tuned_on_conversations_resumed_on_two_ranks(tmp_path: Path) -> None:
    """examples/vlm_sft_train.py --model-family qwen2-vl: a tiny random
    Qwen2VLForConditionalGeneration (saved with its processor, loaded from the folder) takes the
    packed batches as they come (model_inputs: pixel patches, grids, 3-D positions), the
    assistant-only loss; 1 rank stops at step 2, 2 ranks finish the epoch: every conversation
    once, equal steps, finite losses."""
    from tests.support.interleaved import conversation_rows
    from tests.support.tiny_models import qwen_model, qwen_processor, qwen_tokenizer

    listing = write_rows(tmp_path / "llava.json", conversation_rows(tmp_path, 16))
    run_cli("pack", str(listing), str(tmp_path / "shards"), "--max-count", "8", "-q")
    tok, ids = qwen_tokenizer(tmp_path / "tok")
    qwen_model(ids).save_pretrained(str(tmp_path / "model"))
    qwen_processor(56 * 56).save_pretrained(str(tmp_path / "model"))
    args = [
        *("--shards", str(tmp_path / "shards"), "--tokenizer", str(tok)),
        *("--model-family", "qwen2-vl", "--model", str(tmp_path / "model")),
        *("--image-token", "<|image_pad|>", "--length", "96", "--batch-size", "2"),
        *("--workers", "1", "--cache-dir", str(tmp_path / "cache"), "--epochs", "1"),
        *("--checkpoint", str(tmp_path / "ckpt"), "--save-every", "2"),
    ]
    _run(1, "vlm_sft_train.py", *args, "--max-steps", "2", "--keys-out", str(tmp_path / "a"))
    out = _run(2, "vlm_sft_train.py", *args, "--resume", "--keys-out", str(tmp_path / "b"))
    assert "resumed at step 2 of a 1-rank run" in out
    first, rest = _steps(tmp_path / "a", 1), _steps(tmp_path / "b", 2)
    assert len(rest[0]) == len(rest[1]) > 0
    seen = _keys(first, 0) + _keys(rest, 0)
    assert sorted(seen) == sorted(r["id"] for r in json.loads(listing.read_text()))
    assert set(seen.values()) == {1}
    assert all(math.isfinite(s["loss"]) for r in first + rest for s in r)
