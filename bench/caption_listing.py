"""A caption listing for the benchmark images: one JSONL row per image with a made-up caption.

    python bench/caption_listing.py bench/data/images bench/data/captions.jsonl

Rows: ``path`` (relative to the listing's folder), ``label`` (the class folder's name) and
``caption`` (a short sentence of 8-16 words, deterministic per image), what a CLIP-style data
set carries. ``wdstool pack bench/data/captions.jsonl DEST`` turns it into shards with
``KEY.txt`` captions.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

WORDS = [
    "a",
    "photo",
    "of",
    "the",
    "small",
    "large",
    "red",
    "blue",
    "green",
    "old",
    "new",
    "bright",
    "dark",
    "wooden",
    "metal",
    "cat",
    "dog",
    "bird",
    "tree",
    "house",
    "street",
    "car",
    "boat",
    "sky",
    "river",
    "mountain",
    "city",
    "field",
    "in",
    "on",
    "near",
    "under",
    "with",
    "by",
    "at",
    "morning",
    "evening",
    "light",
    "shadow",
    "close",
    "view",
    "from",
    "above",
]


def main(images: str, listing: str) -> None:
    root, out = Path(images), Path(listing)
    rows = []
    for cls in sorted(p.name for p in root.iterdir() if p.is_dir()):
        for img in sorted((root / cls).iterdir()):
            rng = random.Random(img.name)
            caption = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16)))
            rel = os.path.relpath(img, out.parent)
            rows.append({"path": rel, "label": cls, "caption": f"{caption} ({cls})"})
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, out)
    print(f"wrote {len(rows)} rows to {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
