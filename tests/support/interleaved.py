"""Listings of documents (samples of several images and texts) with real images, for the tests
of pack, inspect, verify and show: OBELICS-style rows (``images`` and ``texts``, two parallel
lists), LLaVA-style rows (``images`` and a text with ``<image>`` markers) or conversations
(LLaVA-Instruct's ``conversations``), as JSON, JSON Lines or parquet."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from PIL import Image

from tests.conftest import jpeg_bytes

TEXTS = ("A cat on a mat. ", "Voilà: le chien 🐕.", "Two birds,\nthen a tree.")


def image(root: Path, name: str, seed: int) -> tuple[str, tuple[int, int]]:
    """A real image under ``root/img/`` (a JPEG, every third a PNG; sizes vary with ``seed``):
    its path relative to ``root`` and its (width, height)."""
    size = (40 + 7 * (seed % 5), 30 + 11 * (seed % 3))
    data = jpeg_bytes(seed, size)
    rel = f"img/{name}.jpg"
    if seed % 3 == 2:
        out = io.BytesIO()
        Image.open(io.BytesIO(data)).save(out, format="PNG")
        data, rel = out.getvalue(), f"img/{name}.png"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(data)
    return rel, size


def obelics_rows(root: Path, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` documents, 1 to 3 images each, texts around them (parallel lists, nulls where the
    other list has its entry), and a ``url`` column."""
    rows = []
    for i in range(n):
        texts: list[str | None] = []
        images: list[str | None] = []
        for j in range(1 + (i + seed) % 3):
            if (i + j) % 2 == 0:
                texts.append(TEXTS[(i + j) % 3])
                images.append(None)
            rel, _ = image(root, f"d{seed}_{i:02d}_{j}", seed * 101 + i * 7 + j)
            texts.append(None)
            images.append(rel)
        texts.append(TEXTS[i % 3])
        images.append(None)
        rows.append({"url": f"https://example.org/{i}", "texts": texts, "images": images})
    return rows


def llava_rows(root: Path, n: int, seed: int = 0, column: str = "caption") -> list[dict]:
    """``n`` rows: 1 to 3 images and a text with one ``<image>`` marker each (every third row
    without markers)."""
    rows = []
    for i in range(n):
        images = [
            image(root, f"l{seed}_{i:02d}_{j}", seed * 97 + i * 5 + j)[0] for j in range(1 + i % 3)
        ]
        if i % 3 == 2:
            text = f"Describe these {len(images)} pictures."
        else:
            text = "".join(f"<image>\nPicture {j}: " for j in range(len(images))) + "what is it?"
        rows.append({"images": images, column: text, "id": i})
    return rows


def conversation_rows(root: Path, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` LLaVA-Instruct-like rows (``id``, ``image``, ``conversations`` of ShareGPT turns):
    one or two images (an ``image`` path, or a list), 1 or 2 rounds of questions and answers;
    every third row is text only (no ``image``)."""
    rows = []
    for i in range(n):
        k = 0 if i % 3 == 2 else 1 + (i % 4 == 0)
        images = [image(root, f"c{seed}_{i:02d}_{j}", seed * 89 + i * 3 + j)[0] for j in range(k)]
        turns = [
            {"from": "human", "value": "".join("<image>\n" for _ in images) + TEXTS[i % 3]},
            {"from": "gpt", "value": f"Answer {i}: " + "a cat on a mat, " * (1 + i % 4)},
        ]
        if i % 2:
            turns += [{"from": "human", "value": "And then?"}, {"from": "gpt", "value": "A tree."}]
        row: dict[str, Any] = {"id": f"c{seed}-{i:04d}", "conversations": turns}
        if images:
            row["image"] = images[0] if len(images) == 1 else images
        rows.append(row)
    return rows


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as a ``.jsonl`` or ``.parquet`` file (by the suffix of ``path``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".json":  # a list of rows, as LLaVA publishes its files
        path.write_text(json.dumps(rows), encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def expected(rows: list[dict[str, Any]], text: str | None = None) -> list[dict[str, Any]]:
    """Per row, the ``texts`` and image paths its sample's ``KEY.json`` holds: the row's own
    lists (OBELICS), or ``text`` split at its markers (LLaVA; images first without any)."""
    out = []
    for row in rows:
        if text is None:
            texts, paths = row["texts"], [p for p in row["images"] if p is not None]
        else:
            paths = row["images"]
            pieces = row[text].split("<image>")
            if len(pieces) == 1:
                texts = [None] * len(paths) + [row[text]]
            else:
                texts = [pieces[0]] + [x for p in pieces[1:] for x in (None, p)]
                texts = [t for t in texts if t != ""]
        out.append({"texts": texts, "paths": paths})
    return out
