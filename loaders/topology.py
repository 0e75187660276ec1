"""Who am I in the job: rank and world size, detected once and validated loudly (the value is
the plan's :class:`loaders.plan.Topology`, which also holds the rank's worker count)."""

from __future__ import annotations

import os

from loaders.plan import Topology
from wdstool.base.errors import ConfigError
from wdstool.base.host import usable_cores


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer") from None


def detect_topology(rank: int | None = None, world_size: int | None = None) -> Topology:
    """Explicit arguments, else torch.distributed when initialised, else RANK/WORLD_SIZE, else 0/1.

    Never silently rank 0 in a distributed job: a half-set or malformed environment is an error.
    """
    if (rank is None) != (world_size is None):
        raise ConfigError("pass both rank and world_size, or neither (to detect them)")
    if rank is not None and world_size is not None:
        return Topology(rank, world_size)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return Topology(dist.get_rank(), dist.get_world_size())
    env_rank, env_world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if (env_rank is None) != (env_world is None):
        raise ConfigError(
            f"RANK={os.environ.get('RANK')!r} and WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}: "
            "set both (torchrun does) or neither; under Lightning (which sets WORLD_SIZE only), "
            "call make_loader in train_dataloader(), once its process group is up"
        )
    if env_rank is not None and env_world is not None:
        return Topology(env_rank, env_world)
    return Topology(0, 1)


def check_topology(topology: Topology) -> None:
    """Raise if torch.distributed now runs another rank or world size than ``topology``, which
    was detected earlier: a loader built before the process group started (say in a Lightning
    DataModule's ``__init__``) would read another rank's share, or every sample on every rank."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    now = Topology(dist.get_rank(), dist.get_world_size())
    if (now.rank, now.world_size) != (topology.rank, topology.world_size):
        raise ConfigError(
            f"this loader was made for rank {topology.rank} of {topology.world_size}, but "
            f"torch.distributed runs rank {now.rank} of {now.world_size}: make_loader ran before "
            "the process group started; make it afterwards (under Lightning: in "
            "train_dataloader()/val_dataloader()), or pass rank= and world_size="
        )


def local_world_size() -> int:
    """Ranks on this node (torchrun's ``LOCAL_WORLD_SIZE``; 1 without it)."""
    return max(1, _env_int("LOCAL_WORLD_SIZE") or 1)


def cores_per_rank() -> int:
    """CPU cores this process may use, shared among the ranks on this node."""
    return max(1, usable_cores() // local_world_size())
