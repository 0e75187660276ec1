"""JPEGs of every kind the encoders here write (chroma subsampling, progressive, restart markers,
grey), over sharp colour noise, for the decoders' exactness tests."""

from __future__ import annotations

import io

import torch
from PIL import Image


def noise(w: int, h: int, seed: int) -> Image.Image:
    # sharp colour noise over a smooth gradient: chroma upsampling differs at every pixel, so a
    # wrong edge rule or an off-by-one in the band shows
    g = torch.Generator().manual_seed(seed)
    base = torch.linspace(0, 255, w).expand(h, w)
    grain = torch.randint(0, 256, (h, w, 3), generator=g)
    arr = ((base.unsqueeze(-1) + grain) / 2).to(torch.uint8).numpy()
    return Image.fromarray(arr, "RGB")


KINDS = {
    "420": {"subsampling": 2},
    "422": {"subsampling": 1},
    "444": {"subsampling": 0},
    "progressive": {"progressive": True},
    "restart-markers": {"restart_marker_blocks": 2},
    "grey": {},
}


def jpeg(w: int, h: int, kind: str, seed: int = 0, quality: int = 90) -> bytes:
    img = noise(w, h, seed)
    if kind == "grey":
        img = img.convert("L")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality, **KINDS[kind])
    return buf.getvalue()


def image_matrix(sizes: tuple[tuple[int, int], ...]) -> list[bytes]:
    """Every JPEG kind at every size (kind by kind), then a PNG and a lossless WebP."""
    out = [jpeg(w, h, kind, seed=w + h) for kind in sorted(KINDS) for w, h in sizes]
    for fmt in ("PNG", "WEBP"):
        buf = io.BytesIO()
        noise(53, 38, 3).save(buf, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
        out.append(buf.getvalue())
    return out
