"""What stream-bench compares the loader with, on the same data and the same augmentation.

- ``imagefolder``: torchvision ``ImageFolder`` + ``DataLoader(shuffle=True)``, PIL decode and the
  classic transforms (RandomResizedCrop, flip, ToTensor, Normalize): what most training scripts do.
- ``webdataset``: a plain upstream pipeline on the same shards
  (``WebDataset(..., nodesplitter=split_by_node).shuffle().decode("pil")...batched()`` + ``WebLoader``);
  with a recipe (``stream-bench --transform``), upstream webdataset as its users run one:
  ``torchvision.io.decode_image`` on the raw bytes + the same v2 pipeline, uint8 batches.
- ``webdataset-fast``: the same upstream pipeline given wdstool's decoder and augmentation
  (``decode_train`` on the raw bytes, the crop drawn from the header and only the crop decoded,
  as in the loader; uint8 out): what is left of the difference is the pipeline itself (tar
  parsing, batching, inter-process copies).
- ``ceiling``: the same decode + recipe as the loader (its fused head, then its tail seeded as in
  a worker) over the same samples, in as many processes as workers, with no loader, no IPC and
  no batching: what this machine can do.
  ``partial=False`` gives the ceiling of whole-image decoding (the pre-partial-decode figure).
"""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch

from loaders.parquet_read import parquet_samples
from loaders.parquet_source import ParquetIndex
from loaders.plan import Slice
from loaders.source import DatasetIndex, ShardAccess
from wdstool.base.remote import open_shard
from wdstool.format.tar_read import TarSampleReader

IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")


def classic_train_transform(image_size: int) -> Any:
    """RandomResizedCrop + flip + ToTensor + Normalize on PIL images: what most scripts use."""
    from torchvision import transforms

    return transforms.Compose(
        [
            transforms.RandomResizedCrop(image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )


def imagefolder_loader(
    root: str,
    *,
    workers: int,
    batch_size: int,
    image_size: int,
    prefetch_factor: int,
    pin_memory: bool = False,
    recipe: Any = None,
) -> torch.utils.data.DataLoader:
    """ImageFolder + PIL + the classic transforms; with ``recipe`` (a v2 pipeline) the files'
    bytes decoded by ``torchvision.io.decode_image`` and that pipeline (uint8 batches)."""
    from torchvision import datasets

    if recipe is None:
        ds = datasets.ImageFolder(root, transform=classic_train_transform(image_size))
    else:
        ds = datasets.ImageFolder(root, loader=_read_bytes, transform=_DecodeThen(recipe))
    kwargs: dict[str, Any] = {"prefetch_factor": prefetch_factor} if workers else {}
    return torch.utils.data.DataLoader(
        ds,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=pin_memory,
        **kwargs,
    )


def webdataset_loader(
    urls: list[str],
    *,
    workers: int,
    batch_size: int,
    image_size: int,
    prefetch_factor: int,
    shuffle_buffer: int = 1000,
    same_decoder: bool = False,
    scaled_decode: bool = True,
    recipe: Any = None,
) -> Any:
    """The plain upstream pipeline: PIL decode + the classic transforms; with ``recipe`` (a v2
    pipeline) ``torchvision.io.decode_image`` + that pipeline; with ``same_decoder``, wdstool's
    decode + augmentation on the raw bytes (uint8 batches)."""
    import webdataset as wds

    ds = wds.WebDataset(
        urls, nodesplitter=wds.split_by_node, shardshuffle=len(urls), empty_check=False
    ).shuffle(shuffle_buffer)
    if same_decoder:
        transform: Any = _FastAugment(image_size, scaled_decode)
    elif recipe is not None:
        transform = _DecodeThen(recipe)
    else:
        ds = ds.decode("pil")
        transform = classic_train_transform(image_size)
    ds = (
        ds.to_tuple("jpg;png;jpeg;webp", "cls", "__key__")
        .map_tuple(transform, int, str)
        .batched(batch_size, partial=True)
    )
    kwargs: dict[str, Any] = {"prefetch_factor": prefetch_factor} if workers else {}
    return wds.WebLoader(ds, batch_size=None, num_workers=workers, **kwargs)


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class _DecodeThen:
    """``torchvision.io.decode_image`` (RGB) on raw bytes, then a v2 pipeline (picklable)."""

    def __init__(self, recipe: Any) -> None:
        self.recipe = recipe

    def __call__(self, data: bytes) -> torch.Tensor:
        from torchvision.io import ImageReadMode, decode_image

        from loaders.recipe import kernels

        kernels.uninstall()  # upstream runs torchvision's stock kernels (a no-op unless forked)
        img = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), ImageReadMode.RGB)
        return self.recipe(img)


class _FastAugment:
    """wdstool's decode + RandomResizedCrop + flip on raw bytes (picklable for workers)."""

    def __init__(self, image_size: int, scaled: bool = True) -> None:
        self.image_size = image_size
        self.scaled = scaled
        self.rng: random.Random | None = None

    def __call__(self, data: bytes) -> torch.Tensor:
        from loaders.recipe.builtin import train_sample

        if self.rng is None:
            self.rng = random.Random()
        return train_sample(data, self.image_size, self.rng, scaled=self.scaled)  # as the loader


def samples_of(index: DatasetIndex, storage_options: dict | None) -> Iterator[dict[str, bytes]]:
    """Every sample's members, in order: tar shards read through, or Parquet files' row groups
    (their image column only)."""
    if isinstance(index, ParquetIndex):
        assert index.columns is not None
        image = index.columns.image(index.image, index.urls[0].split("#")[0])
        only = replace(index, image=image, reads=())
        slices = [Slice(u, 0, n) for u, n in enumerate(index.sizes)]
        access = ShardAccess(storage_options=storage_options)
        for _s, sample, _why in parquet_samples(slices, only, access):
            if sample is not None:
                yield sample.parts
        return
    for url in index.urls:
        with open_shard(url, storage_options) as f:
            for s in TarSampleReader(f, url):
                yield s.parts


def _ceiling_worker(
    args: tuple[list[bytes], Any, bool, bool, bool, bool, int, Any],
) -> tuple[int, float]:
    images, recipe, as_float, partial, channels_last, scaled, seed, barrier = args
    from loaders.pool import new_batch
    from loaders.recipe import Seeder, Where
    from loaders.recipe.normalize import normalize

    torch.set_num_threads(1)  # as in a DataLoader worker: one thread per process
    rng, seeder = random.Random(seed), Seeder(Where.WORKER, recipe.opaque)
    # one reused slot in the batch layout the loader writes: resize straight into it
    slot = (
        None
        if recipe.size is None
        else new_batch(1, recipe.size, False, torch.uint8, channels_last)[0]
    )
    if barrier is not None:
        barrier.wait()
    t = time.perf_counter()
    for data in images:
        out = recipe(data, rng, seeder, slot, partial=partial, scaled=scaled)
        if as_float and out.dtype == torch.uint8:
            normalize(out)
    return len(images), time.perf_counter() - t


def ceiling(
    index: DatasetIndex,
    *,
    processes: int,
    image_size: int,
    output: str,
    max_samples: int | None = None,
    storage_options: dict | None = None,
    partial: bool | None = None,
    channels_last: bool = False,
    train: bool = True,
    scaled_decode: bool = True,
    transform: Any = None,
) -> dict[str, float]:
    """Decode + recipe over the dataset's images in ``processes`` processes at once (images are
    read into memory first, untimed). Returns samples/s = total samples / slowest process time.
    ``partial``: decode only the region of JPEGs (default: as the loader does, see
    ``decode.PARTIAL_DECODE``); False: whole images, as before the partial decoder.
    ``channels_last``: resize into a slot laid out as the loader's ``channels_last`` batches.
    ``train``/``scaled_decode``/``transform``: as ``make_loader``'s."""
    from loaders.recipe import build_recipe
    from wdstool.format.decode import PARTIAL_DECODE

    recipe = build_recipe(transform, train=train, image_size=image_size, output=output)
    partial = PARTIAL_DECODE if partial is None else partial
    images: list[bytes] = []
    for parts in samples_of(index, storage_options):
        data = next((v for k, v in parts.items() if k in IMAGE_EXTS), None)
        if data is not None:
            images.append(data)
        if max_samples and len(images) >= max_samples:
            break
    n = max(1, processes)
    ctx = mp.get_context("spawn")
    # the processes start timing together; one process needs no barrier (a Manager is one more
    # spawned interpreter, ~3.5 s of CPU importing torch here)
    barrier = ctx.Manager().Barrier(n) if n > 1 else None
    as_float = output == "float"
    parts = [
        (images[i::n], recipe, as_float, partial, channels_last, scaled_decode, i, barrier)
        for i in range(n)
    ]
    with ctx.Pool(n) as pool:
        results = pool.map(_ceiling_worker, parts)
    total = sum(r[0] for r in results)
    slowest = max(r[1] for r in results)
    return {
        "samples": total,
        "seconds": slowest,
        "samples_per_s": total / slowest if slowest else 0.0,
    }
