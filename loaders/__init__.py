"""Streaming loaders: WebDataset shards -> batches for torchrun/DDP training.

>>> from loaders import make_loader, normalize
"""

from loaders.decode import normalize
from loaders.device import DeviceDecoder
from loaders.loader import StreamingLoader, make_loader
from wdstool.storage import RetryPolicy

__all__ = ["DeviceDecoder", "RetryPolicy", "StreamingLoader", "make_loader", "normalize"]
