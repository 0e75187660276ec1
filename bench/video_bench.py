"""Video clips: wdstool's loader against the ways people load clips from WebDataset shards
today (issue 37). Every run is a fresh process over one epoch of the same shards, 16 frames
stride 2, RandomResizedCrop(224) + flip on every frame of a clip, uint8 batches of 8, 2 workers;
rounds interleaved, ratios pair by pair (same round).

    python bench/video_bench.py generate DATA [--videos 200]   # DATA/videos + DATA/shards
    python bench/video_bench.py DATA [--rounds 3] [--out bench/results/video]
    python bench/video_bench.py run NAME DATA                 # one pipeline, one JSON line
    python bench/video_bench.py memory DATA                   # 3 epochs: bytes read, peak PSS
    python bench/video_bench.py report bench/results/video    # the table again from its JSON

Pipelines (``NAME``):
- ``wdstool``: ``make_loader(clips=Clips(frames=16, stride=2), image_size=224)``;
- ``wdstool-tc``: the same with TorchCodec as the decoder (``WDSTOOL_VIDEO_DECODER``);
- ``webdataset-whole``: upstream webdataset, every video decoded whole (PyAV, what
  ``torchvision.io.read_video`` did; webdataset's own ``torch_video`` calls it, and torchvision
  0.29 removed it), a random clip sampled, the same v2 crop, ``DataLoader`` batching;
- ``seek-pyav`` / ``seek-torchcodec``: the careful per-sample baseline: upstream webdataset,
  each sample's clip decoded with a seek to the keyframe before it and forward to its last
  frame (PyAV, one thread, one kept reformatter; TorchCodec ``seek_mode="approximate"``), the
  same v2 crop;
- ``decord``: decord's ``VideoReader.get_batch`` per sample (seek + decode forward), the same
  crop (runs from the peers' venv, where decord is installed: ``bench/peers/requirements.txt``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FRAMES, STRIDE, SIZE, BATCH, WORKERS = 16, 2, 224, 8, 2
PAIRS = [
    ("wdstool", "webdataset-whole"),
    ("wdstool", "seek-pyav"),
    ("wdstool", "seek-torchcodec"),
    ("wdstool", "wdstool-tc"),
    ("wdstool", "decord"),
]
PEERS_PY = REPO / ".venv-peers" / "bin" / "python"
IN_PEERS = {"decord"}


def generate(data: Path, videos: int, workers: int) -> None:
    from shard_writer.pack import PackOptions, pack
    from shard_writer.sample_videos import VideoSettings, generate_sample_videos

    settings = VideoSettings(width=640, height=360, fps=30, gop=60, bframes=3, crf=23)
    t = time.perf_counter()
    n = generate_sample_videos(
        data / "videos",
        videos=videos,
        classes=10,
        min_seconds=10,
        max_seconds=60,
        settings=settings,
        workers=workers,
    )
    print(f"{videos} videos, {n / 1e6:.0f} MB in {time.perf_counter() - t:.0f} s", flush=True)
    if not (data / "shards" / "index.json").exists():
        pack(str(data / "videos"), str(data / "shards"), PackOptions(workers=workers, max_count=25))


# --- the baselines' pieces (module level: DataLoader workers pickle them) -------------------
def _crop(clip_thwc: Any, rng: random.Random) -> Any:
    """v2 RandomResizedCrop(224) + horizontal flip, one draw for the clip [T,H,W,3]."""
    import torch
    from torchvision.transforms import v2

    torch.manual_seed(rng.getrandbits(63))
    tf = v2.Compose([v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip()])
    return tf(torch.as_tensor(clip_thwc).permute(0, 3, 1, 2))


def _whole(sample: dict) -> tuple[Any, int]:
    import av
    import numpy as np

    key = sample["__key__"]
    rng = random.Random(key)
    with av.open(io.BytesIO(sample["mp4"])) as c:
        stream = c.streams.video[0]
        stream.codec_context.thread_count = 1
        frames = np.stack(
            [_REFORMAT.reformat(f, format="rgb24").to_ndarray() for f in c.decode(stream)]
        )
    span = (FRAMES - 1) * STRIDE
    start = rng.randint(0, max(0, len(frames) - 1 - span))
    idx = [min(start + k * STRIDE, len(frames) - 1) for k in range(FRAMES)]
    return _crop(frames[idx], rng), int(sample["cls"])


def _indices(frames: int, rng: random.Random) -> list[int]:
    span = (FRAMES - 1) * STRIDE
    start = rng.randint(0, max(0, frames - 1 - span))
    return [min(start + k * STRIDE, frames - 1) for k in range(FRAMES)]


class _Reformatter:
    """PyAV's VideoReformatter, made on first use in each worker process."""

    def reformat(self, frame: Any, **kw: Any) -> Any:
        if not hasattr(self, "r"):
            from av.video.reformatter import VideoReformatter

            self.r = VideoReformatter()
        return self.r.reformat(frame, **kw)


_REFORMAT = _Reformatter()


def _seek_pyav(sample: dict) -> tuple[Any, int]:
    import av
    import numpy as np

    rng = random.Random(sample["__key__"])
    with av.open(io.BytesIO(sample["mp4"])) as c:
        stream = c.streams.video[0]
        stream.codec_context.thread_count = 1
        fps, tb = float(stream.average_rate), float(stream.time_base)
        want = _indices(int(stream.frames), rng)
        origin = stream.start_time or 0
        c.seek(origin + int((want[0] - 0.5) / fps / tb), stream=stream, backward=True)
        got: dict[int, Any] = {}
        for f in c.decode(stream):
            k = round((f.pts - origin) * tb * fps)
            if k in want:  # one reformatter kept: to_ndarray(format=) makes one a frame
                got[k] = _REFORMAT.reformat(f, format="rgb24").to_ndarray()
            if k >= want[-1]:
                break
    return _crop(np.stack([got[k] for k in want]), rng), int(sample["cls"])


def _seek_torchcodec(sample: dict) -> tuple[Any, int]:
    import torch
    from torchcodec.decoders import VideoDecoder

    rng = random.Random(sample["__key__"])
    data = torch.frombuffer(bytearray(sample["mp4"]), dtype=torch.uint8)
    dec = VideoDecoder(data, seek_mode="approximate", num_ffmpeg_threads=1, dimension_order="NHWC")
    clip = dec.get_frames_at(_indices(int(dec.metadata.num_frames), rng)).data
    return _crop(clip, rng), int(sample["cls"])


def _decord(sample: dict) -> tuple[Any, int]:
    import decord

    rng = random.Random(sample["__key__"])
    vr = decord.VideoReader(io.BytesIO(sample["mp4"]), num_threads=1)
    clip = vr.get_batch(_indices(len(vr), rng)).asnumpy()
    return _crop(clip, rng), int(sample["cls"])


BASELINES = {
    "webdataset-whole": _whole,
    "seek-pyav": _seek_pyav,
    "seek-torchcodec": _seek_torchcodec,
    "decord": _decord,
}


def _worker_init(_: int) -> None:
    import torch

    torch.set_num_threads(1)


def run_baseline(name: str, data: Path) -> dict[str, Any]:
    import torch
    import webdataset as wds

    index = json.loads((data / "shards" / "index.json").read_text())
    urls = [str(data / "shards" / s["url"]) for s in index["shardlist"]]
    ds = (
        wds.WebDataset(urls, shardshuffle=False, nodesplitter=None, empty_check=False)
        .shuffle(50, rng=random.Random(0))
        .map(BASELINES[name])
    )
    loader = torch.utils.data.DataLoader(
        ds, batch_size=BATCH, num_workers=WORKERS, worker_init_fn=_worker_init
    )
    return _epoch(loader, lambda b: b[0])


def _wdstool_loader(data: Path) -> Any:
    from loaders import Clips, make_loader

    return make_loader(
        str(data / "shards"),
        batch_size=BATCH,
        clips=Clips(frames=FRAMES, stride=STRIDE),
        image_size=SIZE,
        num_workers=WORKERS,
        rank=0,
        world_size=1,
    )


def _data_bytes(data: Path) -> int:
    index = json.loads((data / "shards" / "index.json").read_text())
    return sum(s["filesize"] for s in index["shardlist"])


def run_wdstool(data: Path) -> dict[str, Any]:
    loader = _wdstool_loader(data)
    out = _epoch(loader, lambda b: b["video"])
    out["bytes_read"] = loader.bytes_read
    out["data_bytes"] = _data_bytes(data)
    return out


def _epoch(loader: Any, pixels: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    clips = 0
    first = None
    shape = None
    for batch in loader:
        v = pixels(batch)
        clips += v.shape[0]
        shape = list(v.shape)
        if first is None:
            first = time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    return {
        "clips": clips,
        "seconds": seconds,
        "clips_per_s": clips / seconds,
        "first_batch_s": first,
        "shape": shape,
    }


def run_memory(data: Path, epochs: int = 3) -> dict[str, Any]:
    """wdstool over ``epochs`` epochs: bytes read and the process tree's peak owned PSS
    (anonymous + shared memory, sampled every 0.2 s) per epoch."""
    import threading

    import psutil

    from loaders.monitor.memory import tree_memory

    loader = _wdstool_loader(data)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        me = psutil.Process()
        while not stop.wait(0.2):
            pids = [me.pid, *(c.pid for c in me.children(recursive=True))]
            peak[0] = max(peak[0], tree_memory(pids).owned)

    threading.Thread(target=sample, daemon=True).start()
    out = []
    for e in range(epochs):
        loader.set_epoch(e)
        before, peak[0] = loader.bytes_read, 0
        t0 = time.perf_counter()
        clips = sum(b["video"].shape[0] for b in loader)
        out.append(
            {
                "epoch": e,
                "clips": clips,
                "seconds": time.perf_counter() - t0,
                "bytes_read": loader.bytes_read - before,
                "peak_owned_pss": peak[0],
            }
        )
    stop.set()
    return {"epochs": out, "data_bytes": _data_bytes(data)}


def run_one(name: str, data: Path) -> dict[str, Any]:
    if name == "memory":
        return run_memory(data)
    if name in ("wdstool", "wdstool-tc"):
        if name == "wdstool-tc":
            os.environ["WDSTOOL_VIDEO_DECODER"] = "torchcodec"
        return run_wdstool(data)
    return run_baseline(name, data)


def _subprocess(name: str, data: Path) -> dict[str, Any]:
    py = str(PEERS_PY) if name in IN_PEERS else sys.executable
    if name in IN_PEERS and not PEERS_PY.exists():
        return {"skip": f"{name} runs from .venv-peers (make bench-peers builds it)"}
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [py, __file__, "run", name, str(data)], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"skip": f"{name} failed: {last}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main_bench(data: Path, rounds: int, out: Path) -> None:
    names = sorted({n for pair in PAIRS for n in pair}, key=lambda n: (n != "wdstool", n))
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names:
            got = _subprocess(n, data)
            runs[n].append(got)
            rate = f"{got['clips_per_s']:.2f} clips/s" if "clips_per_s" in got else got["skip"]
            print(f"round {r + 1} {n}: {rate}", flush=True)
    write_report(runs, rounds, out)


def _steady(g: dict[str, Any]) -> float:
    """Clips a second after the first batch (start-up left out)."""
    return (g["clips"] - g["shape"][0]) / (g["seconds"] - g["first_batch_s"])


def _cells(ours: list[dict], theirs: list[dict], rate: Any, name: str) -> tuple[str, str]:
    ok = [g for g in theirs if "clips_per_s" in g]
    rates = [rate(g) for g in ok]
    cell = f"{statistics.median(rates):.2f} ({min(rates):.2f}–{max(rates):.2f})"
    ratios = [
        rate(a) / rate(b)
        for a, b in zip(ours, theirs, strict=True)
        if "clips_per_s" in a and "clips_per_s" in b
    ]
    if name == "wdstool" or not ratios:
        return cell, ""
    return cell, f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}–{max(ratios):.2f})"


def write_report(runs: dict[str, list[dict[str, Any]]], rounds: int, out: Path) -> None:
    """The table of ``runs`` (the JSON ``main_bench`` writes) into OUT.md (and OUT.json)."""
    lines = [
        f"# Video clips ({FRAMES} frames, stride {STRIDE}, RRC {SIZE} + flip, batch {BATCH}, "
        f"{WORKERS} workers), {rounds} rounds, medians",
        "",
        "Whole epoch: from building the loader to its last batch (start-up included); after "
        "the first batch: the rest of the epoch.",
        "",
        "| pipeline | clips/s, whole epoch | wdstool ÷ it | clips/s after the first batch "
        "| wdstool ÷ it | first batch (s) |",
        "|---|---|---|---|---|---|",
    ]
    ours = runs["wdstool"]
    for n, theirs in runs.items():
        ok = [g for g in theirs if "clips_per_s" in g]
        if not ok:
            lines.append(f"| {n} | {theirs[0]['skip']} | | | | |")
            continue
        whole, wr = _cells(ours, theirs, lambda g: g["clips_per_s"], n)
        steady, sr = _cells(ours, theirs, _steady, n)
        first = statistics.median(g["first_batch_s"] for g in ok)
        lines.append(f"| {n} | {whole} | {wr} | {steady} | {sr} | {first:.2f} |")
    w = ours[0]
    if "bytes_read" in w:
        lines += [
            "",
            f"wdstool bytes read per epoch: {w['bytes_read'] / 1e6:.1f} MB of "
            f"{w['data_bytes'] / 1e6:.1f} MB of shards",
        ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n")
    print("\n".join(lines))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        print(json.dumps(run_one(sys.argv[2], Path(sys.argv[3]))))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "report":  # the table again, from OUT.json
        out = Path(sys.argv[2])
        runs = json.loads(out.with_suffix(".json").read_text())
        write_report(runs, len(runs["wdstool"]), out)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "memory":
        got = _subprocess("memory", Path(sys.argv[2]))
        lines = [
            "| epoch | clips | s | MB read | MB of shards | peak owned PSS (MB) |",
            "|---|---|---|---|---|---|",
        ]
        for e in got["epochs"]:
            lines.append(
                f"| {e['epoch']} | {e['clips']} | {e['seconds']:.1f} | "
                f"{e['bytes_read'] / 1e6:.1f} | {got['data_bytes'] / 1e6:.1f} | "
                f"{e['peak_owned_pss'] / 1e6:.0f} |"
            )
        out = REPO / "bench" / "results" / "video-memory.md"
        out.write_text(
            "# wdstool clips over 3 epochs: bytes read and peak memory\n\n"
            + "\n".join(lines)
            + "\n"
        )
        print("\n".join(lines))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "generate":
        p = argparse.ArgumentParser()
        p.add_argument("data", type=Path)
        p.add_argument("--videos", type=int, default=200)
        p.add_argument("--workers", type=int, default=2)
        a = p.parse_args(sys.argv[2:])
        generate(a.data, a.videos, a.workers)
        return
    p = argparse.ArgumentParser()
    p.add_argument("data", type=Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "video")
    a = p.parse_args()
    main_bench(a.data, a.rounds, a.out)


if __name__ == "__main__":
    main()
