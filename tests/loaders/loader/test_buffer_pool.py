"""Worker batch buffers are reused only once the main process holds no reference to them."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from loaders import make_loader
from loaders.pool import BufferPool


def test_pool_hands_out_only_free_slots_and_reclaims_undelivered_ones() -> None:
    from loaders.pool import FREE, HELD, OUT, SharedPool, batch_bytes, image_layout

    flags = bytearray(4)
    shared = SharedPool(4, batch_bytes(5, [8], torch.uint8), flags)
    pool = BufferPool(shared, base=2, size=2)
    assert (pool.get(), pool.get(), pool.get()) == (2, 3, -1)  # both taken: the caller allocates
    a, coords, end = shared.carve(2, 0, *image_layout(5, 8), torch.uint8)
    b, _, _ = shared.carve(3, 0, *image_layout(3, (4, 6), True), torch.uint8)
    assert a.data_ptr() == coords.resolve().data_ptr() and end >= a.numel()
    assert b.shape == (3, 3, 4, 6) and b.is_contiguous(memory_format=torch.channels_last)
    a.fill_(7)
    assert torch.equal(coords.resolve(), a)  # the main process sees the worker's pixels
    flags[2] = HELD  # delivered: the user holds it
    assert pool.reclaim() == 1 and flags[3] == FREE and flags[2] == HELD  # 3 was never delivered
    shared.release(2)
    assert flags[2] == FREE and pool.get() == 2 and flags[2] == OUT
    with pytest.raises(ValueError, match="does not fit"):
        shared.carve(2, 0, *image_layout(6, 8), torch.uint8)


def test_held_batches_and_views_are_never_overwritten(learnable_dataset: Path) -> None:
    loader = make_loader(learnable_dataset, 4, image_size=16, num_workers=2, prefetch_factor=2)
    for epoch in range(2):
        loader.set_epoch(epoch)
        kept, views, clones = [], [], []
        for i, batch in enumerate(loader):
            px = batch["pixel_values"]
            clones.append(px.clone())
            if i % 3 == 0:
                kept.append((i, px))  # the batch itself
            elif i % 3 == 1:
                views.append((i, px[1:3]))  # only a view of it
            # every third batch is dropped: its buffer goes back to the worker
            del batch, px
        for i, px in kept:
            assert torch.equal(px, clones[i]), i
        for i, v in views:
            assert torch.equal(v, clones[i][1:3]), i
    assert loader.buffers_returned >= 10  # the dropped batches' buffers went back to the workers


def test_worker_batches_arrive_in_the_main_process_pool_without_copies(
    learnable_dataset: Path,
) -> None:
    """With workers, pixels stay in the shared pool the main process allocated (only slot
    numbers cross the process boundary), partial last batches included; labels are copies."""
    loader = make_loader(learnable_dataset, 7, image_size=16, num_workers=2, pin_memory=False)
    assert loader.dataset._shared_pool is None  # nothing resident before the first pass
    batches = iter(loader)
    first = next(batches)
    pool = loader.dataset._shared_pool
    assert pool is not None
    start = pool.storage.data_ptr()
    end = start + pool.storage.nbytes()
    sizes = []
    for batch in itertools.chain([first], batches):
        ptr = batch["pixel_values"].data_ptr()
        assert start <= ptr < end
        assert batch["pixel_values"]._base is None  # its own tensor: views keep it alive
        assert not start <= batch["labels"].data_ptr() < end  # labels are copies
        sizes.append(len(batch["keys"]))
    assert sizes[-1] < 7  # 120 samples: the partial batch came through the pool too


def test_abandoned_passes_do_not_leak_pool_slots(learnable_dataset: Path) -> None:
    """A pass cut short (break after one batch) leaves batches on their way in its slots;
    the next pass reclaims them, so after many abandoned passes every batch still comes
    through the pool (without it, each pass leaked prefetched slots until none was left)."""
    for mode in ("process", "thread"):
        loader = make_loader(
            learnable_dataset, 4, image_size=16, num_workers=2, prefetch_factor=2, worker_mode=mode
        )
        loader.dataset.ensure_pool()  # what the first pass does; the passes keep this pool
        pool = loader.dataset._shared_pool
        start = pool.storage.data_ptr()
        end = start + pool.storage.nbytes()
        for _ in range(12):
            for batch in loader:
                del batch
                break
        ptrs = [b["pixel_values"].data_ptr() for b in loader]
        assert all(start <= p < end for p in ptrs), mode


def _shmem_kb() -> int:
    return next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("Shmem:")
    )


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="needs Linux's /proc/meminfo")
def test_a_loader_not_yet_iterated_holds_no_shared_memory(learnable_dataset: Path) -> None:
    """torch's shared storage is resident as soon as it exists (every page touched), so the
    pool is made at the first pass: making loaders to plan or count (len, a resume check)
    held ~0.5 GB each at 8 workers and batch 64 (test_scale's loaders held 4 GB together)."""
    before = _shmem_kb()
    loaders = [
        make_loader(learnable_dataset, 64, image_size=224, num_workers=8, seed=s) for s in range(4)
    ]
    assert all(len(lo) > 0 and lo.dataset._shared_pool is None for lo in loaders)
    pool_kb = loaders[0].dataset.batch_nbytes() * len(loaders[0].dataset._pool_flags) // 1024
    assert _shmem_kb() - before < pool_kb  # 4 eager pools would be 4x this
    loaders[0].dataset.ensure_pool()
    assert _shmem_kb() - before >= pool_kb * 0.9  # the one allocated is resident, as measured


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="needs Linux's /proc/meminfo")
def test_a_dropped_loader_gives_its_shared_memory_back(learnable_dataset: Path) -> None:
    """A module-level registry held every pool for the life of the process: 15 GB of shmem
    in one make-test worker after a few hundred loaders."""
    import gc

    before = _shmem_kb()
    for seed in range(3):
        loader = make_loader(learnable_dataset, 64, image_size=224, num_workers=2, seed=seed)
        for _ in loader:
            pass
        pool_kb = loader.dataset.batch_nbytes() * len(loader.dataset._pool_flags) // 1024
        del loader, _
        gc.collect()
    assert _shmem_kb() - before < pool_kb  # none of the three is still resident
