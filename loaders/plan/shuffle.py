"""Seeds and the restartable block shuffle of a worker's stream.

A worker's stream is cut into blocks whose sizes double up to the shuffle buffer; each block is
yielded in a permutation seeded by (worker seed, block index). Restarting a stream at any
output position therefore re-reads one block: resuming costs at most one shuffle buffer.
"""

from __future__ import annotations

import numpy as np


def worker_seed(seed: int, epoch: int, rank: int, worker: int, generation: int = 0) -> int:
    entropy = [seed, epoch, rank, worker, 0xB0FF] + ([generation] if generation else [])
    state = np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)
    return int(state[0]) >> 1


def shuffle_blocks(total: int, buffer: int, first: int) -> list[int]:
    """Block boundaries of a worker's stream of ``total`` items: ``[0, b1, b2, ..., total]``.

    Each block is read whole (compressed bytes only) and yielded in a seeded permutation. The
    first block holds ``first`` items so the first batch comes quickly; sizes double up to
    ``buffer``. Because a block's permutation depends only on (seed, block index), a stream can
    be restarted at any output position by re-reading one block: resuming costs at most one
    shuffle buffer, wherever in the epoch the run stopped."""
    if total <= 0:
        return [0]
    if buffer <= 1:
        return [0, total]
    bounds = [0]
    size = max(1, min(first, buffer))
    while bounds[-1] < total:
        bounds.append(min(total, bounds[-1] + size))
        size = min(buffer, size * 2)
    return bounds


def first_block(buffer: int, batch_size: int) -> int:
    return max(1, min(buffer, max(100, batch_size)))


def block_seed(worker_seed: int, block: int) -> int:
    state = np.random.SeedSequence([worker_seed, block, 0xB10C]).generate_state(1, dtype=np.uint64)
    return int(state[0]) >> 1


def block_permutation(seed: int, length: int) -> np.ndarray:
    return np.random.Generator(np.random.PCG64(seed)).permutation(length)
