"""Finding tar headers from an arbitrary offset, and a JPEG's frame header: checked against
Python's tarfile and PIL on real files."""

from __future__ import annotations

import io
import random
import tarfile

import pytest
from PIL import Image, JpegImagePlugin

from tests.conftest import jpeg_bytes
from wdstool.format.images import jpeg_frame
from wdstool.format.tar_read import header_offsets
from wdstool.format.tar_write import END, write_member


def _tar(n: int = 40) -> bytes:
    out = io.BytesIO()
    rng = random.Random(3)
    for i in range(n):
        write_member(out.write, f"k{i:03d}.jpg", jpeg_bytes(i, (rng.randrange(20, 90), 40)))
        write_member(out.write, f"k{i:03d}.cls", str(i % 5).encode())
    out.write(END)
    return out.getvalue()


def test_header_offsets_are_exactly_tarfiles_member_headers() -> None:
    data = _tar()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        want = [m.offset for m in tf.getmembers()]
    assert header_offsets(data) == want
    # from any block: the headers in that stretch, offsets relative to it
    rng = random.Random(0)
    for _ in range(200):
        a = rng.randrange(0, len(data) // 512) * 512
        b = min(len(data), a + rng.randrange(1, 40) * 512)
        assert header_offsets(data[a:b]) == [o - a for o in want if a <= o and o + 512 <= b]


@pytest.mark.parametrize(
    ("mode", "options", "want"),
    [
        ("RGB", {"subsampling": 0}, ("4:4:4", 3, False)),
        ("RGB", {"subsampling": 1}, ("4:2:2", 3, False)),
        ("RGB", {"subsampling": 2}, ("4:2:0", 3, False)),
        ("RGB", {"subsampling": 2, "progressive": True}, ("4:2:0", 3, True)),
        ("L", {}, ("grey", 1, False)),
        ("CMYK", {}, ("cmyk", 4, False)),
    ],
)
def test_jpeg_frame_reads_what_pil_wrote(mode: str, options: dict, want: tuple) -> None:
    out = io.BytesIO()
    Image.new(mode, (37, 21)).save(out, format="JPEG", **options)
    data = out.getvalue()
    frame = jpeg_frame(data)
    assert frame is not None
    assert (frame.width, frame.height) == (37, 21)
    assert (frame.subsampling, frame.components, frame.progressive) == want
    if mode == "RGB":
        img = Image.open(io.BytesIO(data))
        pil = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}[JpegImagePlugin.get_sampling(img)]
        assert frame.subsampling == pil
    # the first bytes up to the frame header are enough; fewer are not
    sof = next(i for i in range(len(data)) if data[i] == 0xFF and data[i + 1] in (0xC0, 0xC2))
    assert jpeg_frame(data[: sof + 10 + 3 * frame.components]) == frame
    assert jpeg_frame(data[: sof + 9]) is None
