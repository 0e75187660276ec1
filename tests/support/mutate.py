"""Random damage to a file's bytes, for fuzzing decoders: the same edits in every fuzz test."""

from __future__ import annotations

import random


def mutate(data: bytearray, rng: random.Random) -> bytearray:
    """1-4 random edits after the first two bytes (the SOI marker): overwrite a byte, delete up
    to 20 bytes, or insert up to 8 random bytes. Edits ``data`` in place and returns it."""
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(2, len(data) - 2)
        op = rng.random()
        if op < 0.5:
            data[at] = rng.randrange(256)
        elif op < 0.7:
            del data[at : at + rng.randint(1, 20)]
        else:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return data
