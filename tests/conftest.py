"""Shared fixtures: small real ImageFolder trees and packed datasets in temporary folders."""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings
from PIL import Image

# CI runs a fixed set of examples (reproducible failures, no flakes); local runs explore.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent
# The default RetryPolicy waits out an outage for 60 s before it gives up; tests of dead
# endpoints (and the commands they run) give up after their attempts instead. Tests of waiting
# out outages pass their own policy (tests/loaders/sources/test_web_sources.py).
os.environ.setdefault("WDSTOOL_RETRY_PATIENCE", "1")
# What the loader keeps per host without a cache_dir (token lengths, large manifests' shard
# tables: $WDSTOOL_CACHE, else ~/.cache/wdstool) goes to a folder of this run, never into the
# user's home; the commands the tests run and the xdist processes inherit it; the process that
# made it removes it.
if "WDSTOOL_TEST_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["WDSTOOL_TEST_CACHE"] = os.environ["WDSTOOL_CACHE"] = tempfile.mkdtemp(
        prefix="wdstool-test-cache-"
    )
    atexit.register(shutil.rmtree, os.environ["WDSTOOL_TEST_CACHE"], ignore_errors=True)


def jpeg_bytes(seed: int, size: tuple[int, int] = (64, 48), quality: int = 85) -> bytes:
    """A small, real, noisy JPEG (deterministic for a seed)."""
    rng = random.Random(seed)
    img = Image.new("RGB", size, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    px = img.load()
    for _ in range(size[0] * size[1] // 4):
        px[rng.randrange(size[0]), rng.randrange(size[1])] = (
            rng.randrange(256),
            rng.randrange(256),
            rng.randrange(256),
        )
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def noise_image(width: int, height: int, seed: int, sigma: float = 30.0) -> Image.Image:
    """Grey Gaussian noise around 128, as ``Image.effect_noise`` makes, but seeded: the same
    image every run (effect_noise draws from an unseeded generator)."""
    import numpy as np

    pixels = np.random.default_rng(seed).normal(128.0, sigma, size=(height, width))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "L").convert("RGB")


def png_bytes(seed: int, size: tuple[int, int] = (40, 30)) -> bytes:
    rng = random.Random(seed)
    img = Image.new("RGBA", size, (rng.randrange(256), 0, rng.randrange(256), 128))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def make_tree(root: Path, counts: dict[str, int], seed: int = 0, ext: str = ".jpg") -> Path:
    """root/<class>/img_XXXX<ext> with `counts[class]` real JPEGs each."""
    n = 0
    for cls, count in counts.items():
        d = root / cls
        d.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            (d / f"img_{i:04d}{ext}").write_bytes(jpeg_bytes(seed * 100_003 + n))
            n += 1
    return root


def run_cli(
    *args: str, check: bool = True, timeout: float = 300, **kw
) -> subprocess.CompletedProcess:
    """Run `python -m wdstool ARGS` in a subprocess (a real process, real exit code)."""
    proc = subprocess.run(
        [sys.executable, "-m", "wdstool", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=kw.pop("cwd", REPO),
        env={**os.environ, **kw.pop("env", {})},
        **kw,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"wdstool {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture
def small_tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "src", {"cat": 7, "dog": 5, "emu": 4})


def dir_bytes(path: Path) -> dict[str, bytes]:
    """Every visible file under path -> its bytes (for byte-identity checks)."""
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
    }


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1 (a free port), in its own process, for the whole session."""
    from wdstool.base.locals3 import LocalS3

    with LocalS3() as s3:
        yield s3


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """A fresh, empty bucket on the session's S3 server."""
    import uuid

    name = f"t-{uuid.uuid4().hex[:16]}"
    s3_server.make_bucket(name)
    return name
