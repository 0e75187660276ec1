"""Do reshard's SRCs carry the same members? Pure, from the shards' scans.

Merging a labelled SRC with an unlabelled one (or one with captions with one without) writes a
data set whose samples differ: a loader's ``label="cls"`` then fails at the first batch that
holds a sample without ``.cls``, and ``--dedupe`` may have kept exactly those copies. So the
members a training reads, labels (``.cls``) and captions (``.txt``), are compared across SRCs
before anything is written, and one some SRCs carry and others lack is named, with the SRCs
on each side. Other members (``.json``, ``.npy``, ...) differ between tools as a rule (an
img2dataset SRC has ``.json``, a packed one not) and are carried as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from shard_writer.tar_sources import ShardScan, SourceSet
from wdstool.format.images import IMAGE_EXTENSIONS
from wdstool.format.video import VIDEO_EXTENSIONS

_MEDIA = IMAGE_EXTENSIONS | VIDEO_EXTENSIONS
COMPARED = {"cls": "labels", "txt": "captions"}  # member kind -> what it holds


def member_kinds(scans: Sequence[ShardScan]) -> frozenset[str]:
    """The extensions of the members of these shards' samples (``seg.png`` for
    ``KEY.seg.png``, lower case), image and video members left out."""
    suffixes = {m[0] for scan in scans for found in scan.samples for m in found.piece.members}
    kinds = {s.lstrip(".").lower() for s in suffixes}  # interned: a few distinct suffixes
    return frozenset(k for k in kinds if k not in _MEDIA)


def _names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def disagreement(sets: Sequence[SourceSet], scans: Sequence[ShardScan]) -> str | None:
    """Each member kind some SRCs carry and others lack, with the SRCs on each side (one line:
    ``.cls (labels) in A, not in B; ...``), or None where they agree (``scans``: every shard
    of ``sets``, SRC after SRC). A SRC without samples has nothing to disagree with."""
    kinds: list[tuple[str, frozenset[str]]] = []
    at = 0
    for s in sets:
        mine = scans[at : at + len(s.urls)]
        at += len(s.urls)
        if any(scan.samples for scan in mine):
            kinds.append((s.name, member_kinds(mine)))
    parts = []
    for kind, meaning in COMPARED.items():
        have = [name for name, k in kinds if kind in k]
        lack = [name for name, k in kinds if kind not in k]
        if have and lack:
            parts.append(f".{kind} ({meaning}) in {_names(have)}, not in {_names(lack)}")
    return "; ".join(parts) or None


def refusal(mixed: str) -> str:
    """The one-line error for SRCs that :func:`disagreement` found differ (``mixed``)."""
    return (
        f"the SRCs carry different members: {mixed}; merged, some samples would lack them (a "
        "loader reading label='cls' fails at the first sample without .cls); pass "
        "allow_mixed_members=True to merge them anyway, or leave a SRC out"
    )


__all__ = ["COMPARED", "disagreement", "member_kinds", "refusal"]
