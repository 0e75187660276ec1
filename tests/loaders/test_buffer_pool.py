"""Worker batch buffers are reused only once the main process holds no reference to them."""

from __future__ import annotations

from pathlib import Path

import torch

from loaders import make_loader
from loaders.pool import BufferPool


def test_pool_reuses_only_released_slots() -> None:
    flags = bytearray(4)
    pool = BufferPool(flags, base=2, size=2)
    _a, sa = pool.get(4, 8)
    b, sb = pool.get(4, 8)
    _c, sc = pool.get(4, 8)  # both slots handed out: a fresh, unpooled buffer
    assert (sa, sb, sc) == (2, 3, -1)
    flags[3] = 1  # the main process let go of b
    d, sd = pool.get(4, 8)
    assert sd == 3 and d.data_ptr() == b.data_ptr() and flags[3] == 0
    e, se = pool.get(3, 8)  # another shape never takes a pooled buffer
    assert se == -1 and e.shape[0] == 3


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
    pool = loader.dataset._shared_pool
    assert pool is not None
    start = pool.pixels.untyped_storage().data_ptr()
    end = start + pool.pixels.untyped_storage().nbytes()
    sizes = []
    for batch in loader:
        ptr = batch["pixel_values"].data_ptr()
        assert start <= ptr < end
        assert batch["pixel_values"]._base is None  # its own tensor: views keep it alive
        assert batch["labels"].untyped_storage().data_ptr() != pool.labels.data_ptr()
        sizes.append(len(batch["keys"]))
    assert sizes[-1] < 7  # 120 samples: the partial batch came through the pool too


def test_shared_pool_slots_are_reused_only_when_released() -> None:
    from loaders.pool import SharedPool

    flags = bytearray(4)
    shared = SharedPool(4, 5, 8, torch.uint8)
    pool = BufferPool(flags, base=2, size=2, shared=shared)
    a, sa = pool.get(5, 8)
    b, sb = pool.get(3, 8)  # a partial batch takes a slot too
    _c, sc = pool.get(5, 8)  # none free: a fresh buffer
    assert (sa, sb, sc) == (2, 3, -1)
    assert a.data_ptr() == shared.pixels[2].data_ptr() and b.shape[0] == 3
    flags[2] = 1
    d, sd = pool.get(5, 8)
    assert sd == 2 and d.data_ptr() == a.data_ptr() and flags[2] == 0
