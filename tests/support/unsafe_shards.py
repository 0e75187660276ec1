"""Shards holding members that are unsafe to extract, built with Python's tarfile, under a valid
manifest (sizes and sha256 match, counts are right), so only the unsafe members can fail verify.

Each kind plants one member that the sample reader skips (no extension, or not a regular file),
so the shard's samples and counts stay exactly those of a clean shard.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.support.tars import add, sample
from wdstool.format.manifest import ShardEntry, build_manifest

NON_UTF8 = b"caf\xe9-\xff".decode("utf-8", "surrogateescape")
LONG_DIR = "d" * 120
USTAR_SPLIT = "d" * 60 + "/../" + "e" * 99


# kind -> (plant one member, the member's name as verify prints it, the tar format to write)
Plant = Callable[[tarfile.TarFile], None]
KINDS: dict[str, tuple[Plant, str, int]] = {
    "absolute name": (lambda tf: add(tf, "/etc/evil", b"x"), "/etc/evil", tarfile.GNU_FORMAT),
    "'..' in the name": (
        lambda tf: add(tf, "a/../../evil", b"x"),
        "a/../../evil",
        tarfile.GNU_FORMAT,
    ),
    "symlink": (
        lambda tf: add(tf, "link.jpg", kind=tarfile.SYMTYPE, linkname="/etc/passwd"),
        "link.jpg",
        tarfile.GNU_FORMAT,
    ),
    "hard link": (
        lambda tf: add(tf, "hard.jpg", kind=tarfile.LNKTYPE, linkname="/etc/shadow"),
        "hard.jpg",
        tarfile.GNU_FORMAT,
    ),
    "character device": (
        lambda tf: add(tf, "tty.jpg", kind=tarfile.CHRTYPE, devmajor=5, devminor=0),
        "tty.jpg",
        tarfile.GNU_FORMAT,
    ),
    "block device": (
        lambda tf: add(tf, "disk.jpg", kind=tarfile.BLKTYPE, devmajor=8, devminor=0),
        "disk.jpg",
        tarfile.GNU_FORMAT,
    ),
    "FIFO": (lambda tf: add(tf, "fifo.jpg", kind=tarfile.FIFOTYPE), "fifo.jpg", tarfile.GNU_FORMAT),
    "non-UTF-8 name": (lambda tf: add(tf, NON_UTF8, b"x"), "caf\\xe9-\\xff", tarfile.GNU_FORMAT),
    # the ustar name field says "evil"; the pax path record, which wins, climbs out
    "'..' in a pax path": (
        lambda tf: add(tf, "evil", b"x", pax_headers={"path": "x/../../evil"}),
        "x/../../evil",
        tarfile.PAX_FORMAT,
    ),
    # ustar splits a long name into a prefix field ("ddd.../..") and a name field ("eee...")
    "'..' in a ustar prefix": (
        lambda tf: add(tf, USTAR_SPLIT, b"x"),
        USTAR_SPLIT,
        tarfile.USTAR_FORMAT,
    ),
    # the ustar name field holds the first 100 characters (no ".."); the L record the whole name
    "'..' in a GNU long name": (
        lambda tf: add(tf, f"{LONG_DIR}/../../evil", b"x"),
        f"{LONG_DIR}/../../evil",
        tarfile.GNU_FORMAT,
    ),
}


def write_shard(path: Path, keys: Sequence[str], plants: Sequence[Plant] = (), fmt=None) -> int:
    """A shard with one sample per key and ``plants`` between the first and the second sample;
    returns the number of samples."""
    with tarfile.open(
        path,
        "w",
        format=tarfile.GNU_FORMAT if fmt is None else fmt,
        encoding="utf-8",
        errors="surrogateescape",
    ) as tf:
        for n, key in enumerate(keys):
            sample(tf, key, seed=n, label=n % 2)
            if n == 0:
                for plant in plants:
                    plant(tf)
    return len(keys)


def write_manifest(dest: Path, nsamples: Sequence[int]) -> Path:
    """``dest/index.json`` for ``dest/shard-00000N.tar`` (N < len(nsamples)), sizes and sha256
    taken from the files."""
    entries = []
    for i, n in enumerate(nsamples):
        data = (dest / shard_name(i)).read_bytes()
        entries.append(
            ShardEntry(
                url=shard_name(i),
                nsamples=n,
                filesize=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )
    manifest = build_manifest(entries, classes=["a", "b"], fingerprint="", options={}, skipped=())
    (dest / "index.json").write_bytes(manifest.dumps())
    return dest


def shard_name(i: int) -> str:
    return f"shard-{i:06d}.tar"


def dataset_with(dest: Path, kind: str, nshards: int = 2) -> Path:
    """``nshards`` shards of 3 samples; the last one holds the planted member of ``kind``."""
    dest.mkdir(parents=True, exist_ok=True)
    plant, _, fmt = KINDS[kind]
    counts = []
    for i in range(nshards):
        keys = [f"s{i}_{j}" for j in range(3)]
        counts.append(
            write_shard(dest / shard_name(i), keys, [plant] if i == nshards - 1 else [], fmt)
        )
    return write_manifest(dest, counts)
