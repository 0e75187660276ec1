"""Streaming loaders: WebDataset shards -> batches for torchrun/DDP training.

>>> from loaders import make_loader, normalize
"""

from loaders.clips import Clips
from loaders.device import DeviceDecoder
from loaders.interleaved import Interleaved, NativeResolution, Packing
from loaders.kinds.interleaved import split_images
from loaders.loader import StreamingLoader
from loaders.make import make_loader
from loaders.recipe.book import per_size
from loaders.recipe.normalize import normalize
from loaders.recipe.schedule import linear_ramp
from loaders.schema import Pad
from loaders.source import Source
from loaders.text import Chat, TextTokenizer
from wdstool.base.retry import RetryPolicy

__all__ = [
    "Chat",
    "Clips",
    "DeviceDecoder",
    "Interleaved",
    "NativeResolution",
    "Packing",
    "Pad",
    "RetryPolicy",
    "Source",
    "StreamingLoader",
    "TextTokenizer",
    "linear_ramp",
    "make_loader",
    "normalize",
    "per_size",
    "split_images",
]
