"""Streaming loaders: WebDataset shards -> batches for torchrun/DDP training.

>>> from loaders import make_loader, normalize
"""

from loaders.decode import normalize
from loaders.loader import StreamingLoader, make_loader

__all__ = ["StreamingLoader", "make_loader", "normalize"]
