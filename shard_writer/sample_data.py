"""A realistic ImageFolder tree of JPEGs for demos, tests and benchmarks, with no network.

Images are cut from the real photographs that ship inside scikit-image, scikit-learn and
matplotlib: random crop, rotation, flip, colour jitter and noise, about 450x380 px, JPEG
quality 90 (4:2:0), ~100 KB each: the decode cost of an ImageNet image. ``size`` asks for
another nominal size (each side still varies by about +-11%; 1600x1200: ~1.2 MB an image),
for benchmarks of large images. Image i of class ``i % classes`` is a pure function of (seed,
i, classes, size): the same seed gives the same bytes whatever the number of workers. Class c is cut from photo ``c % photos`` (with a per-class tint
beyond the number of photos), so a small CNN can learn the classes.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import logging
import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageEnhance

from wdstool.base.errors import ConfigError, DestinationError, InputError
from wdstool.base.host import usable_cores

log = logging.getLogger(__name__)

# (package, folder inside it, file names): natural photographs only
_PHOTO_FILES = (
    (
        "skimage",
        "data",
        (
            "astronaut.png",
            "brick.png",
            "camera.png",
            "chelsea.png",
            "coffee.png",
            "coins.png",
            "grass.png",
            "gravel.png",
            "hubble_deep_field.jpg",
            "ihc.png",
            "moon.png",
            "motorcycle_left.png",
            "retina.jpg",
            "rocket.jpg",
        ),
    ),
    ("sklearn", "datasets/images", ("china.jpg", "flower.jpg")),
    ("matplotlib", "mpl-data/sample_data", ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png")),
)
NOISE_SIGMA = 27.0  # measured: 105 KB average over 200 images at 450x380, quality 90
DEFAULT_SIZE = (450, 380)  # nominal (width, height): drawn in 400..500 x 340..420
_CHUNK = 32


@dataclass(frozen=True, kw_only=True)
class SampleDataSummary:
    """What :func:`generate_sample_data` wrote: the tree's root, its images and classes, their
    total size and the time it took."""

    root: str
    images: int
    classes: int
    total_bytes: int
    seconds: float


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=1)
def source_photos() -> list[tuple[str, Image.Image]]:
    """(name, RGB image) of the photographs found in installed packages, sorted by name."""
    photos = []
    for package, folder, names in _PHOTO_FILES:
        root = _package_dir(package)
        if root is None:
            continue
        for name in names:
            path = root / folder / name
            if path.is_file():
                with Image.open(path) as img:
                    photos.append((f"{package}:{name}", img.convert("RGB")))
    if not photos:
        raise InputError(
            "no source photographs found: install scikit-image, scikit-learn or matplotlib "
            "(pip install -e '.[dev]')"
        )
    return sorted(photos, key=lambda p: p[0])


def render(seed: int, i: int, classes: int, size: tuple[int, int] = DEFAULT_SIZE) -> bytes:
    """The JPEG bytes of image ``i``: a pure function of its arguments."""
    import numpy as np  # with the first image, not with ``import shard_writer`` (~0.15 s)

    nominal_w, nominal_h = size
    photos = source_photos()
    c = i % classes
    _name, photo = photos[c % len(photos)]
    rng = np.random.default_rng([seed, i])
    w0, h0 = photo.size
    area = w0 * h0 * rng.uniform(0.3, 1.0)
    aspect = float(np.exp(rng.uniform(-0.3, 0.3))) * nominal_w / nominal_h
    cw = int(min(w0, max(16, round(np.sqrt(area * aspect)))))
    ch = int(min(h0, max(16, round(np.sqrt(area / aspect)))))
    left = int(rng.integers(0, w0 - cw + 1))
    top = int(rng.integers(0, h0 - ch + 1))
    img = photo.crop((left, top, left + cw, top + ch))
    img = img.rotate(float(rng.uniform(-15, 15)), resample=Image.Resampling.BILINEAR)
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    # the default's draws, stretched to the nominal size (the default's bytes are unchanged)
    out_w = round(int(rng.integers(400, 501)) * nominal_w / DEFAULT_SIZE[0])
    out_h = round(int(rng.integers(340, 421)) * nominal_h / DEFAULT_SIZE[1])
    img = img.resize((out_w, out_h), Image.Resampling.BILINEAR)
    for enhance in (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color):
        img = enhance(img).enhance(float(rng.uniform(0.8, 1.2)))
    pixels = np.asarray(img, dtype=np.float32)
    band = c // len(photos)
    if band:  # more classes than photos: a fixed tint per class keeps them apart
        tint = np.random.default_rng([band, 0x7147]).uniform(0, 255, size=3).astype(np.float32)
        pixels = 0.7 * pixels + 0.3 * tint
    pixels += rng.normal(0.0, NOISE_SIGMA, size=pixels.shape).astype(np.float32)
    out = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    buf = io.BytesIO()
    out.save(buf, format="JPEG", quality=90, subsampling=2)
    return buf.getvalue()


def _paths(root: Path, i: int, images: int, classes: int) -> Path:
    width = max(6, len(str(images - 1)))
    cwidth = max(3, len(str(classes - 1)))
    return root / f"class_{i % classes:0{cwidth}d}" / f"img_{i:0{width}d}.jpg"


def _write_chunk(
    root: str, indices: list[int], seed: int, images: int, classes: int, size: tuple[int, int]
) -> int:
    total = 0
    for i in indices:
        path = _paths(Path(root), i, images, classes)
        data = render(seed, i, classes, size)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        total += len(data)
    return total


def generate_sample_data(
    dest: str | os.PathLike[str],
    *,
    images: int = 2000,
    classes: int = 10,
    seed: int = 0,
    workers: int | None = None,
    progress: bool = False,
    size: tuple[int, int] = DEFAULT_SIZE,
) -> SampleDataSummary:
    """Write ``images`` JPEGs in ``classes`` folders under ``dest``, each about ``size``
    (width, height) pixels."""
    if images < 1:
        raise ConfigError(f"images={images}: must be >= 1")
    if not 1 <= classes <= images:
        raise ConfigError(f"classes={classes}: must be within 1..{images} (the number of images)")
    if len(size) != 2 or min(size) < 16:
        raise ConfigError(f"size={size}: must be (width, height) with both >= 16")
    root = Path(dest)
    if root.exists():
        if not root.is_dir():
            raise DestinationError(f"{root}: exists and is not a folder")
        foreign = [
            p.name for p in root.iterdir() if not (p.is_dir() and p.name.startswith("class_"))
        ]
        if foreign:
            raise DestinationError(
                f"{root}: holds other files ({foreign[0]!r}, ...); choose an empty or new folder"
            )
    started = time.perf_counter()
    source_photos()  # fail early, before any folder is made
    cwidth = max(3, len(str(classes - 1)))
    for c in range(classes):
        (root / f"class_{c:0{cwidth}d}").mkdir(parents=True, exist_ok=True)
    chunks = [list(range(i, min(i + _CHUNK, images))) for i in range(0, images, _CHUNK)]
    workers = workers or usable_cores()
    from tqdm import tqdm

    bar = tqdm(total=images, unit="img", disable=not progress, desc="sample-data")
    total = 0
    try:
        if workers == 1 or len(chunks) == 1:
            for chunk in chunks:
                total += _write_chunk(str(root), chunk, seed, images, classes, size)
                bar.update(len(chunk))
        else:
            with ProcessPoolExecutor(
                max_workers=workers, mp_context=mp.get_context("spawn")
            ) as pool:
                futures = [
                    pool.submit(_write_chunk, str(root), chunk, seed, images, classes, size)
                    for chunk in chunks
                ]
                for chunk, fut in zip(chunks, futures, strict=True):
                    total += fut.result()
                    bar.update(len(chunk))
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    log.info("wrote %d images (%d bytes) in %.1f s", images, total, seconds)
    return SampleDataSummary(
        root=str(root), images=images, classes=classes, total_bytes=total, seconds=seconds
    )
