"""Text for the loader's workers: a Hugging Face tokenizer as picklable settings
(``tokenizer``: ``TextTokenizer``), built once per process (``process_cache``), read from what
it is given (``resolve``); interleaved text and images in one sequence (``interleave``); conversations by the model's chat
template with their loss mask (``chat``); a ``fields_fn`` for a caption (``fields``). Needs the ``text`` extra: ``pip install -e '.[text]'``."""

from loaders.text.chat import Chat
from loaders.text.fields import TokenizeField
from loaders.text.interleave import Encoded
from loaders.text.tokenizer import TextTokenizer

__all__ = ["Chat", "Encoded", "TextTokenizer", "TokenizeField"]
