"""Several data sets in one epoch by weight, and exact evaluation, end to end on real shards."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch

from loaders import Source, make_loader
from shard_writer.pack import PackOptions, pack
from tests.conftest import REPO, noise_image
from tests.loaders.conftest import shard_keys
from wdstool.base.errors import ConfigError


def all_keys(ds: Path) -> list[str]:
    return [k for ks in shard_keys(ds) for k in ks]


def epoch(loader, e: int = 0) -> list[dict]:
    loader.set_epoch(e)
    return list(loader)


def by_source(batches: list[dict]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for b in batches:
        for k, s in zip(b["keys"], b["source"].tolist(), strict=True):
            out.setdefault(s, []).append(k)
    return out


def test_weights_shares_repeats_and_the_walk(uneven_dataset, learnable_dataset) -> None:
    """A (23 samples) at weight 3, B (120) at weight 1 of 143: A gives 107 (each sample 4 or 5
    times, every repeat its own augmentation), B 36 per epoch, walked without repeats."""
    loader = make_loader(
        [Source(uneven_dataset, weight=3), Source(learnable_dataset, weight=1)],
        8,
        image_size=24,
        num_workers=2,
        seed=4,
    )
    assert len(loader) == 18  # ceil(143 / 8)
    seen_b: list[str] = []
    for e in range(4):
        batches = epoch(loader, e)
        got = by_source(batches)
        assert len(got[0]) == 107 and len(got[1]) == 36
        counts = Counter(got[0])
        assert set(counts) == set(all_keys(uneven_dataset))
        assert set(counts.values()) == {4, 5} and list(counts.values()).count(5) == 107 - 4 * 23
        assert len(set(got[1])) == 36
        seen_b += got[1]
        if e == 0:  # a repeated sample is not pixel-identical: each occurrence its own draw
            key = next(k for k, n in counts.items() if n >= 4)
            pixels = [
                b["pixel_values"][i].float().sum().item()
                for b in batches
                for i, (k, s) in enumerate(zip(b["keys"], b["source"].tolist(), strict=True))
                if k == key and s == 0
            ]
            assert len(set(pixels)) == len(pixels)
    assert len(set(seen_b[:108])) == 108  # three epochs: no repeat yet
    assert set(seen_b) == set(all_keys(learnable_dataset))  # the fourth completes the walk


def test_each_source_its_own_label_and_fields(uneven_dataset, img2dataset_shards) -> None:
    folder, written = img2dataset_shards
    loader = make_loader(
        [
            Source(uneven_dataset),
            Source(folder, label="json:class_id", fields={"caption": "txt"}),
        ],
        6,
        image_size=24,
        num_workers=0,
    )
    batches = epoch(loader)
    mine = json.loads((uneven_dataset / "index.json").read_text())["classes"]
    assert mine == ["a", "b", "c"]
    captions = 0
    for b in batches:
        for i, (k, s) in enumerate(zip(b["keys"], b["source"].tolist(), strict=True)):
            if s == 1:
                assert int(b["labels"][i]) == written[k]["meta"]["class_id"]
                assert b["caption"][i] == written[k]["caption"]
                captions += 1
            else:
                assert b["caption"][i] is None  # a field the other source does not ask for
    assert captions == 22  # 44 samples split 1:1: the 21 of source 1, one of them twice


def _stitched(make, k: int, state_hook=None) -> tuple[list[tuple[str, int]], list]:
    first = make()
    it = iter(first)
    head = [next(it) for _ in range(k)]
    state = json.loads(json.dumps(first.state_dict()))
    del it
    if state_hook is not None:
        state = state_hook(state)
    return [
        (key, s) for b in head for key, s in zip(b["keys"], b["source"].tolist(), strict=True)
    ], state


def test_resume_with_changed_weights_finishes_the_epoch_as_planned(
    uneven_dataset, learnable_dataset
) -> None:
    def make(w_a: float = 3, w_b: float = 1, workers: int = 2):
        return make_loader(
            [Source(uneven_dataset, weight=w_a), Source(learnable_dataset, weight=w_b)],
            8,
            image_size=24,
            num_workers=workers,
            seed=4,
        )

    plain = make()
    full = [
        (k, s)
        for b in epoch(plain, 0)
        for k, s in zip(b["keys"], b["source"].tolist(), strict=True)
    ]
    head, state = _stitched(make, 7)
    same = make()
    same.load_state_dict(state)
    tail = [(k, s) for b in same for k, s in zip(b["keys"], b["source"].tolist(), strict=True)]
    assert head + tail == full  # exact continuation
    changed = make(1, 1, workers=1)  # other weights and another worker count
    changed.load_state_dict(state)
    rest = [(k, s) for b in changed for k, s in zip(b["keys"], b["source"].tolist(), strict=True)]
    assert Counter(head + rest) == Counter(full)  # the interrupted epoch as it was planned
    nxt = by_source(epoch(changed, 1))
    assert (len(nxt[0]), len(nxt[1])) == (72, 71)  # then the new weights: 143 split 1:1
    # B's walk continues where epoch 0 stopped: none of its 71 repeats the 36 of epoch 0
    assert not set(nxt[1]) & {k for k, s in full if s == 1}


def test_a_source_the_interrupted_epoch_needs_must_be_there(uneven_dataset, learnable_dataset):
    both = make_loader(
        [Source(uneven_dataset), Source(learnable_dataset)], 8, image_size=24, num_workers=0
    )
    _, state = _stitched(lambda: both, 2)
    alone = make_loader([Source(uneven_dataset)], 8, image_size=24, num_workers=0)
    with pytest.raises(ConfigError, match="another data set") as err:
        alone.load_state_dict(state)
    assert str(learnable_dataset) in err.value.message


@pytest.mark.parametrize(
    ("sources", "kwargs", "message"),
    [
        (lambda u, m: [Source(u), Source(m / "nowhere")], {}, r"source\[1\] .*nowhere"),
        (lambda u, m: [], {}, "empty list of sources"),
        (lambda u, m: [Source(u)], {"epoch_size": 0}, "epoch_size must be >= 1"),
        (lambda u, m: [str(u)], {}, "a mixture is a list of loaders.Source"),
    ],
)
def test_bad_mixtures_fail_at_make_loader(uneven_dataset, tmp_path, sources, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_loader(sources(uneven_dataset, tmp_path), 8, num_workers=0, **kwargs)
    for weight in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="weight"):
            Source(uneven_dataset, weight=weight)


def test_empty_source_with_a_weight_fails(tmp_path: Path, uneven_dataset) -> None:
    empty = tmp_path / "empty"
    shutil.copytree(uneven_dataset, empty)
    manifest = json.loads((empty / "index.json").read_text())
    for e in manifest["shardlist"]:
        e["nsamples"] = 0
    (empty / "index.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="empty"):
        make_loader([Source(uneven_dataset), Source(empty)], 8, num_workers=0)


def test_local_and_s3_sources_mix(uneven_dataset, s3_server, s3_bucket) -> None:
    url = f"s3://{s3_bucket}/ds"
    src = uneven_dataset.parent / "src"
    pack(
        str(src),
        url,
        PackOptions(workers=1, max_count=10),
        storage_options=s3_server.storage_options,
    )
    loader = make_loader(
        [Source(uneven_dataset), Source(url, weight=2, storage_options=s3_server.storage_options)],
        5,
        image_size=24,
        num_workers=2,
    )
    got = by_source(epoch(loader))
    assert (len(got[0]), len(got[1])) == (15, 31)  # 46 split 1:2
    assert set(got[1]) == set(all_keys(uneven_dataset))  # same data, packed to S3


@pytest.mark.parametrize("world", [2, 3, 5])
def test_mask_covers_every_sample_once_with_equal_batches(uneven_dataset, world) -> None:
    """23 samples (a prime) over 2, 3, 5 ranks: the same batch sizes everywhere, padding flagged."""
    shapes, valid_keys = set(), []
    for rank in range(world):
        loader = make_loader(
            str(uneven_dataset),
            4,
            train=False,
            shuffle=False,
            uneven="mask",
            image_size=24,
            num_workers=2,
            rank=rank,
            world_size=world,
        )
        batches = list(loader)
        shapes.add(tuple(len(b["keys"]) for b in batches))
        for b in batches:
            assert b["valid"].dtype == torch.bool and len(b["valid"]) == len(b["keys"])
            valid_keys += [k for k, v in zip(b["keys"], b["valid"].tolist(), strict=True) if v]
    assert len(shapes) == 1
    assert sorted(valid_keys) == sorted(all_keys(uneven_dataset))


def test_mask_with_drop_last_is_refused(uneven_dataset) -> None:
    with pytest.raises(ConfigError, match="mask"):
        make_loader(str(uneven_dataset), 4, uneven="mask", drop_last=True, num_workers=0)


@pytest.fixture(scope="module")
def prime_val(tmp_path_factory) -> Path:
    """23 colour-coded validation images (a prime number) in the learnable set's classes."""
    import io

    from PIL import Image

    root = tmp_path_factory.mktemp("val")
    colours = {"blue": (20, 40, 220), "green": (30, 200, 40), "red": (220, 30, 30)}
    for n, (cls, rgb) in zip((7, 8, 8), colours.items(), strict=True):
        (root / "src" / cls).mkdir(parents=True)
        for i in range(n):
            img = noise_image(48, 40, seed=1000 * len(cls) + 10 * sum(rgb) + i)
            img = Image.blend(img, Image.new("RGB", img.size, rgb), 0.7)
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=90)
            (root / "src" / cls / f"{i:03d}.jpg").write_bytes(buf.getvalue())
    dest = root / "shards"
    pack(str(root / "src"), str(dest), PackOptions(workers=1, max_count=5))
    return dest


@pytest.mark.slow
@pytest.mark.full
def test_exact_top1_over_three_ranks_equals_one_process(learnable_dataset, prime_val, tmp_path):
    from tests.support.torchrun import torchrun

    out, weights = tmp_path / "report", tmp_path / "model.pt"
    args = ["--data", str(learnable_dataset), "--val", str(prime_val), "--device", "cpu"]
    args += ["--epochs", "1", "--batch-size", "4", "--image-size", "32", "--workers", "1"]
    args += ["--out", str(out), "--save-model", str(weights)]
    proc = torchrun(3, *args)
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(3)]
    val = [r["epochs"][0]["val"] for r in reports]
    assert sorted(k for v in val for k in v["keys"]) == sorted(all_keys(prime_val))
    correct, total = val[0]["correct"], val[0]["total"]
    assert total == 23 and f"val top-1 {correct / 23:.4f} ({correct}/23)" in proc.stdout
    # the same model, one process, every sample: the same count
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_ddp", REPO / "examples" / "train_ddp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    model = mod.small_resnet(3)
    model.load_state_dict(torch.load(weights, weights_only=True))
    model.eval()
    loader = make_loader(
        str(prime_val), 7, train=False, shuffle=False, image_size=32, num_workers=0
    )
    with torch.no_grad():
        single = sum(
            int((model(mod.normalize(b["pixel_values"])).argmax(1) == b["labels"]).sum())
            for b in loader
        )
    assert single == correct
