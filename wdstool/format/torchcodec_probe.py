"""Whether TorchCodec can decode videos here, found by decoding one.

TorchCodec 0.17 imports without FFmpeg's shared libraries and loads them at the first decode,
so an import is no answer: :func:`torchcodec_error` decodes a one-frame 16x16 MPEG-4 video
(877 bytes, kept below) once per process and returns why that failed, or None. The guard of
``WDSTOOL_VIDEO_DECODER=torchcodec`` and the skips of TorchCodec's tests both ask it.
"""

from __future__ import annotations

import base64
from functools import cache

# one grey frame, 16x16, MPEG-4 Part 2 in MP4 (written by PyAV's encoder; any FFmpeg decodes it)
_TINY_MP4 = base64.b64decode(
    "AAAAHGZ0eXBpc29tAAACAGlzb21pc28ybXA0MQAAAAhmcmVlAAAAGG1kYXQAAAGzABAHAAABthYFHLb9AAADMW1vb3YA"
    "AABsbXZoZAAAAAAAAAAAAAAAAAAAA+gAAAPoAAEAAAEAAAAAAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAAA"
    "AAAAAAAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAIAAAJbdHJhawAAAFx0a2hkAAAAAwAAAAAAAAAAAAAA"
    "AQAAAAAAAAPoAAAAAAAAAAAAAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAQAAAAAAQAAAAEAAA"
    "AAAAJGVkdHMAAAAcZWxzdAAAAAAAAAABAAAD6AAAAAAAAQAAAAAB021kaWEAAAAgbWRoZAAAAAAAAAAAAAAAAAAAQAAA"
    "AEAAVcQAAAAAAC1oZGxyAAAAAAAAAAB2aWRlAAAAAAAAAAAAAAAAVmlkZW9IYW5kbGVyAAAAAX5taW5mAAAAFHZtaGQA"
    "AAABAAAAAAAAAAAAAAAkZGluZgAAABxkcmVmAAAAAAAAAAEAAAAMdXJsIAAAAAEAAAE+c3RibAAAANpzdHNkAAAAAAAA"
    "AAEAAADKbXA0dgAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAQABAASAAAAEgAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAABj//wAAAGBlc2RzAAAAAAOAgIBPAAEABICAgEEgEQAAAAAAAIAAAAAABYCAgC8AAAGwAQAA"
    "AbWJEwAAAQAAAAEgAMSNiAANAIQCFGMAAAGyTGF2YzYyLjI4LjEwMgaAgIABAgAAABRidHJ0AAAAAAAAAIAAAAAAAAAA"
    "GHN0dHMAAAAAAAAAAQAAAAEAAEAAAAAAHHN0c2MAAAAAAAAAAQAAAAEAAAABAAAAAQAAABRzdHN6AAAAAAAAABAAAAAB"
    "AAAAFHN0Y28AAAAAAAAAAQAAACwAAABidWR0YQAAAFptZXRhAAAAAAAAACFoZGxyAAAAAAAAAABtZGlyYXBwbAAAAAAA"
    "AAAAAAAAAC1pbHN0AAAAJal0b28AAAAdZGF0YQAAAAEAAAAATGF2ZjYyLjEyLjEwMg=="
)


@cache
def torchcodec_error() -> str | None:
    """Why TorchCodec's video decoder cannot be used here (None: it can): the first line of
    what importing it or decoding a tiny video raised (ImportError, or FFmpeg's libraries
    missing), with the exception's type."""
    try:
        import torch
        from torchcodec.decoders import VideoDecoder

        frames = VideoDecoder(torch.frombuffer(bytearray(_TINY_MP4), dtype=torch.uint8))
        frame = frames[0]
        if tuple(frame.shape) != (3, 16, 16):
            return f"decoded a 16x16 test video to shape {tuple(frame.shape)}"
    except Exception as exc:  # ImportError, RuntimeError: "Could not load libtorchcodec"
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        first = first.removesuffix(" Likely causes:")  # TorchCodec's list follows on next lines
        return f"{type(exc).__name__}: {first}"
    return None
