"""Pictures of samples: a thumbnail of an image as the loader's decoder reads it, and the
contact sheet as one PNG (``wdstool show --png``).

Thumbnails come from the loader's own decoder (:mod:`wdstool.format.decode`), so a broken
colour space or an undecodable file looks here as it will in training; a large JPEG is decoded
at 1/2, 1/4 or 1/8 scale in the DCT domain where the C decoder is built. EXIF orientation is
not applied, as the loader does not apply it: a sideways photo shows sideways.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
from torchvision.transforms.v2 import functional as F

from wdstool.format.decode import PARTIAL_DECODE, SCALES, decode_crop, decode_rgb, header_size
from wdstool.format.images import is_jpeg

THUMB = 256  # longest side of a thumbnail, pixels
CELL = 168  # a contact-sheet cell: the thumbnail's box
TEXT_LINES = 2
BACKGROUND = (250, 250, 250)


def thumbnail(data: bytes, where: str, longest: int = THUMB) -> np.ndarray:
    """The image scaled to at most ``longest`` pixels on its long side, uint8 H x W x 3.
    SampleError (naming ``where``) when the loader could not decode it either."""
    img: torch.Tensor | None = None
    if PARTIAL_DECODE and is_jpeg(data):
        width, height = header_size(data, where=where)
        scale = next((s for s in SCALES if max(width, height) >= s * longest), 1)
        if scale > 1:
            img = decode_crop(data, 0, 0, height, width, scale=scale)
    if img is None:
        img = decode_rgb(data, where=where)
    _, h, w = img.shape
    if max(h, w) > longest:
        factor = longest / max(h, w)
        img = F.resize(img, [max(1, round(h * factor)), max(1, round(w * factor))], antialias=True)
    return np.ascontiguousarray(img.permute(1, 2, 0).numpy())


def encode_jpeg(pixels: np.ndarray, quality: int = 88) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def encode_png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _fit(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> str:
    text = text.replace("\n", " ")
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def contact_sheet(
    tiles: Sequence[tuple[np.ndarray | None, Sequence[str]]], title: str, columns: int = 8
) -> Image.Image:
    """One image of the tiles (a thumbnail, or None for an image that could not be shown,
    and up to two lines of text under it), ``columns`` to a row, under a title line."""
    font, small = _font(13), _font(11)
    columns = max(1, min(columns, len(tiles)))
    rows = -(-len(tiles) // columns)
    pad, line = 6, 14
    cell_h = CELL + pad + TEXT_LINES * line
    sheet = Image.new("RGB", (columns * (CELL + pad) + pad, 28 + rows * (cell_h + pad)), BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    draw.text(
        (pad, 7), _fit(draw, title, font, sheet.width - 2 * pad), fill=(20, 20, 20), font=font
    )
    for n, (pixels, lines) in enumerate(tiles):
        x = pad + (n % columns) * (CELL + pad)
        y = 28 + (n // columns) * (cell_h + pad)
        if pixels is None:
            draw.rectangle((x, y, x + CELL - 1, y + CELL - 1), outline=(200, 60, 60), width=2)
            draw.text((x + 8, y + CELL // 2 - 6), "cannot decode", fill=(200, 60, 60), font=small)
        else:
            img = Image.fromarray(pixels)
            img.thumbnail((CELL, CELL))
            sheet.paste(img, (x + (CELL - img.width) // 2, y + (CELL - img.height) // 2))
        for i, text in enumerate(list(lines)[:TEXT_LINES]):
            fitted = _fit(draw, text, small, CELL)
            draw.text((x, y + CELL + pad // 2 + i * line), fitted, fill=(40, 40, 40), font=small)
    return sheet


def save_png(image: Image.Image, path: str) -> None:
    """Write ``image`` as a PNG at ``path`` whole or not at all (a temporary name, renamed)."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        image.save(tmp, format="PNG", optimize=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
