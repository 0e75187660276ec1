"""examples/train_video.py as a real torchrun job on 2 CPU ranks (gloo): random training clips
in equal steps on both ranks, then exact evaluation: every (video, clip) once over the ranks."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from shard_writer.pack import PackOptions, pack
from shard_writer.sample_videos import VideoSettings, generate_sample_videos
from tests.conftest import REPO
from tests.support.torchrun import torchrun_env, train_ddp_cmd

pytestmark = pytest.mark.slow


def test_video_training_and_exact_evaluation_on_two_ranks(tmp_path: Path) -> None:
    settings = VideoSettings(width=64, height=48, fps=12, gop=6, bframes=2)
    generate_sample_videos(
        tmp_path / "v", videos=9, classes=3, min_seconds=0.5, max_seconds=2.5, settings=settings
    )
    pack(str(tmp_path / "v"), str(tmp_path / "shards"), PackOptions(workers=1, max_count=3))
    out = tmp_path / "report"
    cmd = train_ddp_cmd(
        2,
        *("--data", str(tmp_path / "shards"), "--val", str(tmp_path / "shards")),
        *("--device", "cpu", "--epochs", "2", "--batch-size", "2", "--frames", "4"),
        *("--stride", "2", "--size", "32", "--val-clips", "3", "--workers", "1"),
        *("--out", str(out)),
        script="train_video.py",
    )
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=240, cwd=REPO, env=torchrun_env()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    for e in range(2):
        assert {r["epochs"][e]["steps"] for r in reports} == {reports[0]["len"]} == {2}
        trained = [k for r in reports for k in r["epochs"][e]["keys"]]
        assert len(trained) == len(set(trained)) == 8  # 9 videos, full batches of 2 on 2 ranks
        seen = Counter(tuple(c) for r in reports for c in r["epochs"][e]["val"]["clips"])
        assert len(seen) == 27 and set(seen.values()) == {1}  # 9 videos x 3 clips, once each
        assert len({k for k, _ in seen}) == 9 and {c for _, c in seen} == {0, 1, 2}
        assert all(r["epochs"][e]["val"]["videos"] == 9 for r in reports)
    assert "val top-1" in proc.stdout
