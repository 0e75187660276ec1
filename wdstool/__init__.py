"""wdstool: pack image datasets into WebDataset shards and stream them into PyTorch."""

__version__ = "0.1.0"
