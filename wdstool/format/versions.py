"""A data set's version history, as ``index.json`` records it once something was appended.

A data set packed once has no history: its manifest describes version 1. ``pack --append`` and
``reshard --append`` add shards after the last one (old shards keep their bytes and names) and
write the history: version 1 as the manifest described it before the first append, then one
entry per append. Each entry gives the data set *as of* that version (``identity``: the
manifest's fingerprint then; ``shards``, ``samples``: its totals then; its shards are the first
``shards`` of the shard list) and what the version added (when, by which command, from which
input, how many shards and samples, ``part``: the fingerprint of that input, so that running the
same append again adds nothing).

Loaders use the history to finish an epoch planned on an earlier version exactly on that
version's samples (``loaders.state``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wdstool.base.errors import ShardError


@dataclass(frozen=True, kw_only=True)
class Version:
    number: int
    identity: str  # the manifest's fingerprint as of this version
    shards: int  # shards in the data set as of this version (the first ``shards`` of the list)
    samples: int  # samples in the data set as of this version
    added_shards: int
    added_samples: int
    created: str | None = None  # ISO 8601, UTC; None where unknown (version 1 before appends)
    command: str = "pack"
    inputs: tuple[str, ...] = ()
    part: str = ""  # fingerprint of the input this version added (its SRC and options)
    next_key: int = 0  # pack --append numbers its keys from here
    options: dict[str, Any] = field(default_factory=dict)  # the options this version was made with

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.number,
            "identity": self.identity,
            "shards": self.shards,
            "samples": self.samples,
            "added_shards": self.added_shards,
            "added_samples": self.added_samples,
            "created": self.created,
            "command": self.command,
            "inputs": list(self.inputs),
            "part": self.part,
            "next_key": self.next_key,
            "options": self.options,
        }

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Version:
        if not isinstance(raw, dict):
            raise ShardError(f"{where}: malformed manifest: a version entry is not an object")
        try:
            ints = {k: raw[k] for k in ("version", "shards", "samples")}
            if any(type(v) is not int or v < 0 for v in ints.values()):
                raise TypeError("version, shards and samples must be ints >= 0")
            inputs = raw.get("inputs") or []
            if not isinstance(inputs, list) or not isinstance(raw["identity"], str):
                raise TypeError("identity must be a string and inputs a list")
            return cls(
                number=ints["version"],
                identity=raw["identity"],
                shards=ints["shards"],
                samples=ints["samples"],
                added_shards=int(raw.get("added_shards", 0)),
                added_samples=int(raw.get("added_samples", 0)),
                created=None if raw.get("created") is None else str(raw["created"]),
                command=str(raw.get("command", "pack")),
                inputs=tuple(str(i) for i in inputs),
                part=str(raw.get("part", "")),
                next_key=int(raw.get("next_key", 0)),
                options=dict(raw.get("options") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ShardError(f"{where}: malformed manifest: bad version entry: {exc}") from None


def parse_versions(raw: Any, num_shards: int, where: str) -> tuple[Version, ...]:
    """The history of a manifest (``()`` when it has none), checked: numbered 1, 2, ...,
    each version's shards a prefix no longer than the next's, the last one the whole list."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ShardError(f"{where}: malformed manifest: 'versions' must be a list")
    versions = tuple(Version.from_json(r, where) for r in raw)
    shards = 0
    for n, v in enumerate(versions, 1):
        if v.number != n or v.shards < shards:
            raise ShardError(
                f"{where}: malformed manifest: version {v.number} is out of order "
                f"(expected version {n} with at least {shards} shards)"
            )
        shards = v.shards
    if versions and shards != num_shards:
        raise ShardError(
            f"{where}: malformed manifest: the last version has {shards} shards, "
            f"the shard list {num_shards}"
        )
    return versions
