"""Clips from real video shards: which frames, seeded draws, resume, exact evaluation, mixtures
with images, layouts, audio, bad videos. Frames carry their own index
(``shard_writer.sample_videos``), so the tests read back which frames a clip holds."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from torchvision.transforms import v2

from loaders import Clips, Source, make_loader, normalize
from shard_writer.sample_videos import VideoSettings, frame_index
from tests.support.videos import SMALL, pattern, video_bytes, write_shards
from wdstool.base.errors import ConfigError, SampleError
from wdstool.format.torchcodec_probe import torchcodec_error

LENGTHS = [72, 40, 10, 96, 55, 30, 64, 7, 48, 80]  # frames; 10 and 7 are shorter than a clip
FPS = SMALL.fps
KEEP = v2.Resize((SMALL.height, SMALL.width))  # the frames as decoded: their index strips read


@pytest.fixture(scope="module")
def videos() -> list[bytes]:
    return [video_bytes(n, i=i) for i, n in enumerate(LENGTHS)]


@pytest.fixture(scope="module")
def shards(videos: list[bytes], tmp_path_factory: pytest.TempPathFactory) -> str:
    return pattern(write_shards(tmp_path_factory.mktemp("clips"), videos, per_shard=3))


@pytest.fixture(scope="module")
def foreign(videos: list[bytes], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same videos without the probed facts (a foreign tool's shards)."""
    root = tmp_path_factory.mktemp("foreign")
    return pattern(write_shards(root, videos, per_shard=3, facts=False))


def _loader(src: str, clips: Clips, **kw):  # type: ignore[no-untyped-def]
    kw.setdefault("num_workers", 0)
    kw.setdefault("transform", KEEP)
    kw.setdefault("batch_size", 3)
    return make_loader(src, clips=clips, rank=kw.pop("rank", 0), world_size=kw.pop("ws", 1), **kw)


def _by_key(loader) -> dict[tuple[str, int], torch.Tensor]:  # type: ignore[no-untyped-def]
    out = {}
    for b in loader:
        for i, key in enumerate(b["keys"]):
            out[(key, int(b["clip_index"][i]))] = b["video"][i].clone()
    return out


def _indices(clip: torch.Tensor) -> list[int]:
    return [frame_index(f.permute(1, 2, 0).numpy()) for f in clip]


def test_a_clip_holds_the_frames_it_was_drawn_with(shards: str) -> None:
    """Every clip: ``frames`` frames ``stride`` apart inside the video (a short one: its frames
    then its last repeated); the span is the frames' times."""
    clips = Clips(frames=6, stride=3)
    for b in _loader(shards, clips, seed=3):
        assert b["video"].shape[1:] == (6, 3, SMALL.height, SMALL.width)
        for i, key in enumerate(b["keys"]):
            n = LENGTHS[int(key[1:])]
            got = _indices(b["video"][i])
            if n > 15:
                assert got == list(range(got[0], got[0] + 18, 3)) and got[-1] < n
            else:
                assert got == [min(k, n - 1) for k in range(0, 18, 3)]
            start, end = b["clip_span"][i].tolist()
            assert start == pytest.approx(got[0] / FPS, abs=1e-3)
            assert end == pytest.approx((got[-1] + 1) / FPS, abs=1e-3)


def test_random_starts_are_uniform_and_seeded(shards: str) -> None:
    """Over many epochs a video's random start covers every possible start about equally
    (chi-square), and a seed gives the same clips again."""
    clips = Clips(frames=4, stride=2)
    starts: Counter[int] = Counter()
    first = None
    for epoch in range(60):
        loader = _loader(shards, clips, seed=1, num_workers=0)
        loader.set_epoch(epoch)
        for (key, _c), clip in _by_key(loader).items():
            if key == "v0003":  # 96 frames: starts 0..89
                starts[_indices(clip)[0]] += 1
        if epoch == 0:
            first = dict(starts)
    again = _loader(shards, clips, seed=1)
    assert {_indices(c)[0] for (k, _), c in _by_key(again).items() if k == "v0003"} == set(first)
    assert set(starts) <= set(range(90)) and len(starts) > 35
    # 60 draws over 90 starts: every start's count is small, none dominates
    assert max(starts.values()) <= 6


def test_same_clips_for_any_worker_count_mode_and_backend(shards: str, foreign: str) -> None:
    """A sample's clip depends on (seed, epoch, key, occurrence) only: 0 or 2 worker
    processes, decode threads, the pack's facts or none, PyAV or TorchCodec."""
    clips = Clips(frames=5, stride=2)
    kw = dict(seed=7, transform=v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip()]))
    base = _by_key(_loader(shards, clips, **kw))
    assert len(base) == len(LENGTHS)
    for other in (
        _by_key(_loader(shards, clips, num_workers=2, **kw)),
        _by_key(_loader(shards, clips, num_workers=2, worker_mode="thread", **kw)),
        _by_key(_loader(foreign, clips, **kw)),
    ):
        assert other.keys() == base.keys()
        assert all(torch.equal(other[k], base[k]) for k in base)


@pytest.mark.parametrize("backend", ["pyav", "torchcodec"])
def test_both_decoders_give_the_same_clips(
    shards: str, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "torchcodec" and torchcodec_error():
        pytest.skip(f"TorchCodec does not load here: {torchcodec_error()}")
    from wdstool.format import clipdecode

    clips = Clips(frames=5, stride=3)
    clipdecode.video_backend.cache_clear()
    monkeypatch.setenv("WDSTOOL_VIDEO_DECODER", backend)
    try:
        got = _by_key(_loader(shards, clips, seed=2))
    finally:
        clipdecode.video_backend.cache_clear()
    monkeypatch.setenv("WDSTOOL_VIDEO_DECODER", "pyav" if backend == "torchcodec" else "torchcodec")
    if torchcodec_error():
        monkeypatch.setenv("WDSTOOL_VIDEO_DECODER", "pyav")
    try:
        ref = _by_key(_loader(shards, clips, seed=2))
    finally:
        clipdecode.video_backend.cache_clear()
    assert all(_indices(got[k]) == _indices(ref[k]) for k in ref)
    assert all((got[k].int() - ref[k].int()).abs().max() <= 2 for k in ref)


def test_resume_mid_epoch_continues_with_the_same_clips(shards: str) -> None:
    clips = Clips(frames=4, stride=2)
    kw = dict(seed=5, transform=v2.RandomResizedCrop(24), batch_size=2)
    whole = [b for b in _loader(shards, clips, **kw)]
    first = _loader(shards, clips, **kw)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    resumed = _loader(shards, clips, num_workers=2, **kw)  # another worker count too
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert [b["keys"] for b in rest] == [b["keys"] for b in whole[2:]] or sorted(
        k for b in rest for k in b["keys"]
    ) == sorted(k for b in whole[2:] for k in b["keys"])
    ref = {k: b["video"][i] for b in whole for i, k in enumerate(b["keys"])}
    for b in rest:
        for i, k in enumerate(b["keys"]):
            assert torch.equal(b["video"][i], ref[k])


@pytest.mark.parametrize("ws", [1, 2, 3])
def test_exact_evaluation_covers_every_clip_once(shards: str, ws: int) -> None:
    """clips_per_video=3, train=False, uneven="mask": over the ranks, every (video, clip) exactly
    once among the valid samples, equal batches on every rank; the 3 uniform clips of a long
    video start at the first, middle and last possible start."""
    clips = Clips(frames=4, stride=2, clips_per_video=3)
    seen: Counter[tuple[str, int]] = Counter()
    steps = set()
    starts: dict[str, dict[int, int]] = {}
    for rank in range(ws):
        loader = _loader(shards, clips, train=False, uneven="mask", ws=ws, rank=rank)
        batches = list(loader)
        steps.add((len(loader), len(batches), tuple(len(b["keys"]) for b in batches)))
        for b in batches:
            for i, key in enumerate(b["keys"]):
                if b["valid"][i]:
                    c = int(b["clip_index"][i])
                    seen[(key, c)] += 1
                    starts.setdefault(key, {})[c] = _indices(b["video"][i])[0]
    assert len(steps) == 1
    assert seen == Counter({(f"v{i:04d}", c): 1 for i in range(len(LENGTHS)) for c in range(3)})
    room = LENGTHS[3] - 1 - 6  # v0003: 96 frames, a clip spans 7
    assert starts["v0003"] == {0: 0, 1: round(room / 2), 2: room}


def test_segments_take_one_frame_per_segment(shards: str) -> None:
    clips = Clips(frames=4, sampling="segments")
    for train in (True, False):
        for b in _loader(shards, clips, train=train, seed=4):
            for i, key in enumerate(b["keys"]):
                n = LENGTHS[int(key[1:])]
                got = _indices(b["video"][i])
                for k, f in enumerate(got):
                    lo, hi = (
                        math.floor(k * n / 4),
                        max(math.floor(k * n / 4) + 1, math.floor((k + 1) * n / 4)),
                    )
                    assert lo <= f < min(max(hi, lo + 1), n) or (n < 4 and f < n)


def test_short_videos_loop_or_pad(shards: str) -> None:
    """v0007 has 7 frames: a clip of 6 frames 2 apart loops (0 2 4 6 1 3) or pads (black frames
    and frame_mask False)."""
    looped = _by_key(_loader(shards, Clips(frames=6, stride=2, short="loop")))
    assert _indices(looped[("v0007", 0)]) == [0, 2, 4, 6, 1, 3]
    loader = _loader(shards, Clips(frames=6, stride=2, short="pad"))
    for b in loader:
        for i, key in enumerate(b["keys"]):
            if key == "v0007":
                assert b["frame_mask"][i].tolist() == [True] * 4 + [False] * 2
                assert int(b["video"][i][4:].max()) == 0 and int(b["video"][i][:4].max()) > 0


def test_cthw_layout_is_the_same_clip_transposed(shards: str) -> None:
    kw = dict(seed=9, transform=v2.Compose([v2.RandomResizedCrop(20), v2.ColorJitter(0.4, 0.4)]))
    a = [b for b in _loader(shards, Clips(frames=3), **kw)]
    c = [b for b in _loader(shards, Clips(frames=3, layout="CTHW"), **kw)]
    for x, y in zip(a, c, strict=True):
        assert y["video"].shape == (x["video"].shape[0], 3, 3, 20, 20)
        assert torch.equal(y["video"], x["video"].transpose(1, 2))
        assert y["video"].is_contiguous()
    assert normalize(c[0]["video"], dim=-4).transpose(1, 2).allclose(normalize(a[0]["video"]))


def test_the_tail_draws_once_per_clip(shards: str) -> None:
    """An op after the crop draws once per clip: RandomGrayscale(0.5) turns a whole clip grey
    or leaves it all in colour, never some of its frames."""
    tf = v2.Compose([KEEP, v2.RandomGrayscale(0.5)])
    grey = Counter()
    for seed in range(3):
        for b in _loader(shards, Clips(frames=4), transform=tf, seed=seed, batch_size=10):
            v = b["video"].int()
            per_frame = (v[:, :, 0] == v[:, :, 1]).flatten(2).all(-1)  # [B,T]: frame is grey
            assert (per_frame.all(1) | ~per_frame.any(1)).all()
            grey.update(per_frame.all(1).tolist())
    assert grey[True] > 3 and grey[False] > 3


def test_images_and_videos_in_one_epoch(shards: str, uneven_dataset: Path) -> None:
    """A mixture: image samples become still clips (every frame the same), by weight."""
    loader = make_loader(
        [Source(shards, weight=1), Source(str(uneven_dataset), weight=1)],
        batch_size=4,
        clips=Clips(frames=3),
        image_size=32,
        epoch_size=20,
        num_workers=0,
        rank=0,
        world_size=1,
    )
    kinds = Counter()
    for b in loader:
        for i in range(len(b["keys"])):
            clip = b["video"][i]
            still = bool(torch.equal(clip[0], clip[1]) and torch.equal(clip[1], clip[2]))
            kinds["image" if int(b["source"][i]) == 1 else "video"] += 1
            if int(b["source"][i]) == 1:
                assert still and b["clip_span"][i].tolist() == [0.0, 0.0]
    assert kinds == Counter(video=10, image=10)


def test_audio_rides_along_padded(tmp_path: Path) -> None:
    s = VideoSettings(width=64, height=48, fps=20, gop=10, audio=16000)
    vids = [video_bytes(n, s, i=i) for i, n in enumerate([30, 50, 12])]
    src = pattern(write_shards(tmp_path, vids, per_shard=3))
    clips = Clips(frames=4, stride=3, audio=8000, audio_channels=2)
    b = next(iter(_loader(src, clips, transform=v2.Resize((48, 64)), batch_size=3)))
    lengths = b["audio_lengths"].tolist()
    for i in range(3):
        start, end = b["clip_span"][i].tolist()
        assert lengths[i] == pytest.approx((end - start) * 8000, abs=2)
        assert b["audio_mask"][i].sum() == lengths[i]
        assert (
            b["audio"][i, :, lengths[i] :].abs().max() == 0
            if lengths[i] < b["audio"].shape[-1]
            else True
        )
        assert b["audio"][i, :, : lengths[i]].abs().max() > 0.1  # the tone
    assert b["audio"].shape[:2] == (3, 2)


def test_a_bad_video_is_named_or_replaced(videos: list[bytes], tmp_path: Path) -> None:
    bad = list(videos[:4])
    bad[2] = bad[2][:200] + bytes(len(bad[2]) - 200)  # header kept, the stream zeroed
    src = pattern(write_shards(tmp_path, bad, per_shard=4, facts=False))
    with pytest.raises(SampleError, match=r"v-000000\.tar: sample 'v0002'"):
        list(_loader(src, Clips(frames=3)))
    loader = _loader(src, Clips(frames=3), on_error="skip", max_replaced=None)
    keys = [k for b in loader for k in b["keys"]]
    assert len(keys) == 4 and "v0002" not in keys and loader.num_replaced == 1


def test_settings_a_clips_loader_refuses(shards: str) -> None:
    with pytest.raises(ConfigError, match=r"stride .* or fps"):
        Clips(stride=2, fps=10)
    with pytest.raises(ConfigError, match="frames must be"):
        Clips(frames=0)
    with pytest.raises(ConfigError, match="sampling='every'"):
        Clips(sampling="every")
    with pytest.raises(ConfigError, match="output='float'"):
        _loader(shards, Clips(), output="float")
    with pytest.raises(ConfigError, match="repeats=2 and Clips"):
        _loader(shards, Clips(clips_per_video=3), repeats=2)
    with pytest.raises(ConfigError, match="one output size"):
        _loader(shards, Clips(), transform=v2.ColorJitter(0.1))


def test_pad_fields_batch_variable_lengths(shards: str) -> None:
    """fields_fn returning token ids of different lengths: padded, with lengths and mask."""
    loader = make_loader(
        shards,
        batch_size=5,
        clips=Clips(frames=2),
        transform=KEEP,
        fields={"meta": "json"},
        fields_fn=_tokens,
        pad_fields={"tokens": -1},
        num_workers=0,
        rank=0,
        world_size=1,
    )
    for b in loader:
        for i, key in enumerate(b["keys"]):
            n = int(key[1:]) % 4 + 1
            assert b["tokens_lengths"][i] == n
            assert b["tokens"][i, :n].tolist() == list(range(n))
            assert (b["tokens"][i, n:] == -1).all()
            assert b["tokens_mask"][i].tolist() == [True] * n + [False] * (b["tokens"].shape[1] - n)


def _tokens(values: dict) -> dict:
    frames = values["meta"]["video"]["frames"]
    n = LENGTHS.index(frames) % 4 + 1
    return {"tokens": torch.arange(n)}
