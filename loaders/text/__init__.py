"""Text for the loader's workers: a Hugging Face tokenizer as picklable settings
(``tokenizer``: ``TextTokenizer``), built once per process (``process_cache``), read from what
it is given (``resolve``); interleaved text and images in one sequence (``interleave``); a
``fields_fn`` for a caption (``fields``). Needs the ``text`` extra: ``pip install -e '.[text]'``."""

from loaders.text.fields import TokenizeField
from loaders.text.interleave import Encoded
from loaders.text.tokenizer import TextTokenizer

__all__ = ["Encoded", "TextTokenizer", "TokenizeField"]
