"""Video shards for tests: real videos (PyAV-encoded, each frame carrying its index: see
``shard_writer.sample_videos``) in real tar shards, written as ``wdstool pack`` writes them
(``KEY.json`` with the probed facts under "video") or as a foreign tool does (no facts)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from shard_writer.sample_videos import VideoSettings, encode_video
from wdstool.format.video import probe_video

SMALL = VideoSettings(width=96, height=64, fps=24, gop=12, crf=23)


def video_bytes(frames: int, settings: VideoSettings = SMALL, i: int = 0) -> bytes:
    return encode_video(frames, settings, seed=0, i=i)


def write_shards(
    dest: Path,
    videos: list[bytes],
    *,
    per_shard: int = 4,
    facts: bool = True,
    labels: bool = True,
    prefix: str = "v",
) -> list[Path]:
    """``videos`` into shards of ``per_shard`` samples (keys ``{prefix}NNNN``, label i % 3)."""
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(0, len(videos), per_shard):
        path = dest / f"{prefix}-{s // per_shard:06d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(s, min(s + per_shard, len(videos))):
                members = [("mp4" if videos[i][4:8] == b"ftyp" else "webm", videos[i])]
                if labels:
                    members.append(("cls", b"%d" % (i % 3)))
                if facts:
                    meta = {"video": probe_video(videos[i]).to_json()}
                    members.append(("json", json.dumps(meta).encode()))
                for ext, data in members:
                    info = tarfile.TarInfo(f"{prefix}{i:04d}.{ext}")
                    info.size, info.mtime = len(data), 0
                    tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


def pattern(paths: list[Path]) -> str:
    """The brace pattern of shards written by :func:`write_shards`."""
    first = paths[0].name
    stem = first.rsplit("-", 1)[0]
    return str(paths[0].parent / f"{stem}-{{000000..{len(paths) - 1:06d}}}.tar")


def shard_samples(dest: Path) -> dict[str, dict[str, bytes]]:
    """Every sample of every shard in DEST: key -> {ext: bytes}."""
    out: dict[str, dict[str, bytes]] = {}
    for shard in sorted(dest.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for m in tar.getmembers():
                key, ext = m.name.split(".", 1)
                f = tar.extractfile(m)
                assert f is not None
                out.setdefault(key, {})[ext] = f.read()
    return out
