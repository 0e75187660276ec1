"""The epoch plan: which samples each rank and DataLoader worker reads, and in what order.

A pure function of (the mixture, an :class:`EpochSpec`, a :class:`Topology`):
no I/O, no environment, no torch.distributed, no global RNG (an import contract keeps torch and
storage out of this package). Everything that must hold (disjoint cover, equal batch counts on
every rank, determinism, resume = continuation) is a property of these modules:
``epoch`` (a fresh epoch), ``resume`` (the rest of an interrupted one, same or other topology),
``shuffle`` (seeds, the restartable block shuffle), ``items`` (slices and pieces), ``packing``
(samples of known token counts into sequences of a token budget).
"""

from loaders.plan.epoch import (
    EpochItems,
    RankPlan,
    RankShare,
    WorkerPlan,
    batches_of,
    num_batches,
    plan_epoch,
    samples_per_rank,
    shard_slack,
)
from loaders.plan.epoch_spec import EpochSpec, Split, Topology, Uneven, as_enum, as_uneven, k_of
from loaders.plan.items import Item, Mix, Piece, Slice, take_items
from loaders.plan.mixture import MixSource, Mixture, apportion
from loaders.plan.packing import Packing, Span, pack_sequences
from loaders.plan.resume import Segment, plan_resumed, remaining_items
from loaders.plan.shuffle import block_permutation, block_seed, first_block, shuffle_blocks

__all__ = [
    "EpochItems",
    "EpochSpec",
    "Item",
    "Mix",
    "MixSource",
    "Mixture",
    "Packing",
    "Piece",
    "RankPlan",
    "RankShare",
    "Segment",
    "Slice",
    "Span",
    "Split",
    "Topology",
    "Uneven",
    "WorkerPlan",
    "apportion",
    "as_enum",
    "as_uneven",
    "batches_of",
    "block_permutation",
    "block_seed",
    "first_block",
    "k_of",
    "num_batches",
    "pack_sequences",
    "plan_epoch",
    "plan_resumed",
    "remaining_items",
    "samples_per_rank",
    "shard_slack",
    "shuffle_blocks",
    "take_items",
]
