"""A vision-language model family's inputs as an output of the loader: its processor's pixels,
grids and positions, built in the workers from the model's own processor settings, uint8 across
the process boundary, normalized on the device by one call (``family.model_inputs(batch,
device)``).

    Interleaved(model=Qwen2VL.from_processor("my-qwen2-vl/"), tokenizer=..., chat=Chat(), ...)

- ``qwen2_vl``: :class:`Qwen2VL` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL's image path): images at the
  processor's ``smart_resize`` size, laid out as its flattened patches, ``image_grid_thw``,
  ``mm_token_type_ids`` and 3-D rotary positions per packed sample;
- ``llava``: :class:`Llava` (a fixed-size CLIP/SigLIP encoder): the processor's resize, center
  crop and normalization, a fixed number of placeholders an image.
"""

from loaders.families.llava import Llava
from loaders.families.qwen2_vl import Qwen2VL

__all__ = ["Llava", "Qwen2VL"]
