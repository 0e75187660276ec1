"""Parquet data sets as the Hugging Face Hub holds them, written by ``datasets`` itself.

``hub_split`` writes ``data/SPLIT-0000K-of-0000N.parquet`` files (``Dataset.to_parquet`` with
row groups of ``group`` rows, as ``push_to_hub`` does): an ``Image`` column of real JPEGs, a
``ClassLabel`` label, a text column; and returns every row's (file, row, image bytes, label).
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import jpeg_bytes

CLASSES = ("cat", "dog", "eel")


def hub_split(
    root: Path,
    split: str = "train",
    files: int = 4,
    rows: int = 100,
    group: int = 100,
    seed: int = 0,
    size: tuple[int, int] = (64, 48),
    text_bytes: int = 0,
) -> list[dict]:
    """``text_bytes``: that many random letters more in each text (a column as large as the
    images, that a reader asked for images and labels must not fetch)."""
    import random

    import datasets

    rng = random.Random(seed)
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.ClassLabel(names=list(CLASSES)),
            "text": datasets.Value("string"),
        }
    )
    (root / "data").mkdir(parents=True, exist_ok=True)
    out = []
    for k in range(files):
        name = f"{split}-{k:05d}-of-{files:05d}"
        images = [jpeg_bytes(seed * 100_003 + k * 1009 + i, size) for i in range(rows)]
        labels = [(k * rows + i) % len(CLASSES) for i in range(rows)]
        texts = [
            f"{split} {k} row {i} " + "".join(rng.choices("abcdefghij", k=text_bytes))
            for i in range(rows)
        ]
        datasets.Dataset.from_dict(
            {"image": [{"bytes": b, "path": None} for b in images], "label": labels, "text": texts},
            features=features,
        ).to_parquet(str(root / "data" / f"{name}.parquet"), batch_size=group)
        out += [
            {"key": f"{name}-{i:06d}", "image": images[i], "label": labels[i], "text": texts[i]}
            for i in range(rows)
        ]
    return out


def damage_group(path: Path, group: int) -> None:
    """Overwrite the page header that starts row group ``group``'s image column chunk: the
    group no longer decodes; the file's footer and other groups stay whole."""
    import pyarrow.parquet as pq

    chunk = pq.read_metadata(path).row_group(group).column(0)
    assert chunk.path_in_schema == "image.bytes"
    with open(path, "r+b") as f:
        f.seek(chunk.data_page_offset)
        f.write(b"\xff" * 16)
