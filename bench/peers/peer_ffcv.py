"""FFCV on its own .beton format, converted once from DATA/images (prepare, cached in
DATA/peers/ffcv-full/, or DATA/peers/ffcv-max{N}/ with ``--ffcv-max-resolution N``):
``ffcv.writer.DatasetWriter(fields={"image": RGBImageField(write_mode="jpg",
max_resolution=N or None, jpeg_quality=90), "label": IntField()}, num_workers=workers)``
``.from_indexed_dataset`` over ImageFolder's file list (samples ``(PIL RGB image, label)``), as
FFCV's ImageNet write script does: every image is decoded and re-encoded as a quality-90 JPEG
by OpenCV (not the files' own bytes), first scaled down (``cv2.INTER_AREA``) to a longer side
of at most N when N is given. FFCV's ImageNet configurations use N = 256..512, and some of them
``write_mode="proportion"`` (a share of the images stored as raw pixels: a larger file, less
to decode); here every image is a JPEG, as in the other peers' formats.

Read with ``ffcv.loader.Loader(beton, batch_size=B, num_workers=workers,
order=OrderOption.RANDOM, drop_last=False, seed=seed)`` (its defaults otherwise:
``os_cache=True``, the .beton memory-mapped through the page cache; ``batches_ahead=3``) and the
pipelines ``image: RandomResizedCropRGBImageDecoder((S, S))`` (scale 0.08-1, ratio 3/4-4/3,
torchvision's draw; it decodes the whole JPEG with libjpeg-turbo, then crops and resizes with
``cv2.resize(INTER_AREA)``, not torchvision's antialiased bilinear) ``-> RandomHorizontalFlip()
-> ToTensor() -> ToTorchImage()``, and ``label: IntDecoder() -> ToTensor() -> Squeeze(1)``
(``Squeeze(1)``, not FFCV's usual ``Squeeze()``, which would squeeze a last batch of one
sample to a 0-d tensor). Batches are uint8 [B, 3, S, S], but strided channels-last
(``ToTorchImage(channels_last=True)``, FFCV's default: a permuted view of the NHWC buffer, no
copy), and int64 [B] labels. They are views into FFCV's ring of ``batches_ahead + 2``
preallocated buffers, overwritten a few batches later.

FFCV runs no worker processes: ``num_workers`` is the number of numba threads that decode and
augment each batch in parallel (``prange`` over the batch; also torch's thread count), driven by
one more thread that assembles the batches ahead. Its pipeline is compiled by numba when the
epoch starts (not cached across processes), so ``first_batch_s`` includes that compilation.
``--seed`` sets the sample order only; the crop and flip draws come from numba's own per-thread
generators, unseeded.

``--recipe full`` is a skip: FFCV has no TrivialAugmentWide or RandomErasing among its ops and
its crop decoder resizes with INTER_AREA only (no bicubic); torch modules in its pipelines run
on whole batches (one draw for the batch) in a single thread, so the recipe's per-image draws
cannot be expressed faithfully."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import Batch, Skip, cached, image_files, main, mark_cached

JPEG_QUALITY = 90


def out_dir(args: argparse.Namespace) -> Path:
    n = args.ffcv_max_resolution
    return (args.data / "peers" / ("ffcv-full" if n is None else f"ffcv-max{n}")).resolve()


def beton(args: argparse.Namespace) -> Path:
    return out_dir(args) / "train.beton"


def check(args: argparse.Namespace) -> None:
    if args.recipe == "full":
        raise Skip(
            "FFCV has no TrivialAugmentWide or RandomErasing op, and its crop decoder resizes "
            "with INTER_AREA only (no bicubic); torch modules in its pipelines draw once per "
            "batch, not per image"
        )
    if args.ffcv_max_resolution is not None and args.ffcv_max_resolution < 1:
        raise SystemExit("--ffcv-max-resolution must be >= 1")
    try:
        import ffcv.fields.decoders
        import ffcv.loader
        import ffcv.transforms
        import ffcv.writer  # noqa: F401
    except ImportError as e:
        raise Skip(f"ffcv not importable: {e}") from e


class _Images:
    """ImageFolder's samples as FFCV's writer indexes them: ``(PIL RGB image, label)``."""

    def __init__(self, files: list[str], labels: list[int]) -> None:
        self.files = files
        self.labels = labels

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        from PIL import Image

        with Image.open(self.files[i]) as im:
            return im.convert("RGB"), self.labels[i]


def prepare(args: argparse.Namespace) -> None:
    from ffcv.fields import IntField, RGBImageField
    from ffcv.reader import Reader
    from ffcv.writer import DatasetWriter

    out = out_dir(args)
    if cached(out, args.data):
        return
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    files, labels = image_files(args.data)
    fields = {
        "image": RGBImageField(
            write_mode="jpg",
            max_resolution=args.ffcv_max_resolution,
            jpeg_quality=JPEG_QUALITY,
        ),
        "label": IntField(),
    }
    writer = DatasetWriter(str(beton(args)), fields, num_workers=max(1, args.workers))
    writer.from_indexed_dataset(_Images(files, labels))
    # the file is allocated in 8 MiB pages, per writer process: say what the JPEGs take too
    size = beton(args).stat().st_size
    payload = int(Reader(str(beton(args))).alloc_table["size"].sum())
    images = sum(Path(f).stat().st_size for f in files)
    print(
        f"ffcv: {beton(args)}: {size / 1e6:.1f} MB, of which samples {payload / 1e6:.1f} MB "
        f"({payload / images:.2f}x the source JPEG files' {images / 1e6:.1f} MB)",
        file=sys.stderr,
    )
    mark_cached(out, args.data)


def build(args: argparse.Namespace) -> Iterator[Batch]:
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, Squeeze, ToTensor, ToTorchImage

    if not cached(out_dir(args), args.data):
        raise SystemExit(f"ffcv: {out_dir(args)} not prepared; run the prepare step first")
    size = args.image_size
    loader = Loader(
        str(beton(args)),
        batch_size=args.batch_size,
        num_workers=args.workers,
        order=OrderOption.RANDOM,
        drop_last=False,
        seed=args.seed,
        pipelines={
            "image": [
                RandomResizedCropRGBImageDecoder((size, size)),
                RandomHorizontalFlip(),
                ToTensor(),
                ToTorchImage(),
            ],
            "label": [IntDecoder(), ToTensor(), Squeeze(1)],
        },
    )
    yield from loader


def config(args: argparse.Namespace) -> dict[str, Any]:
    n = args.ffcv_max_resolution
    path = beton(args)
    mb = f"{path.stat().st_size / 1e6:,.0f} MB, " if path.is_file() else ""
    return {
        "reads": f"FFCV .beton ({mb}every image re-encoded as JPEG q{JPEG_QUALITY}"
        + (", full size)" if n is None else f", longer side <= {n})"),
        "loader": f"Loader(num_workers={args.workers} numba threads, order=RANDOM, "
        "os_cache=True, batches_ahead=3) with RandomResizedCropRGBImageDecoder (INTER_AREA) "
        "-> RandomHorizontalFlip -> ToTensor -> ToTorchImage (channels-last strides)",
    }


def _expected(args: argparse.Namespace) -> int:
    return len(image_files(args.data)[0])  # made from DATA/images: one sample per JPEG


if __name__ == "__main__":
    main("ffcv", build=build, config=config, check=check, prepare=prepare, expected=_expected)
