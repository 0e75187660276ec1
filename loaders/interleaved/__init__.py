"""Samples of several images and text (vision-language data): what such a sample is to the loader
(``spec``: :class:`Interleaved`, ``make_loader(src, output=Interleaved(...))``), how its images and
text are found among its members (``members``), and the native-resolution rule
(``native``: :class:`NativeResolution`). The kind that batches them is
``loaders.kinds.interleaved``."""

from loaders.interleaved.native import NativeResolution
from loaders.interleaved.output import Interleaved, Packing
from loaders.interleaved.sample_parts import Segment, sample_segments

__all__ = ["Interleaved", "NativeResolution", "Packing", "Segment", "sample_segments"]
