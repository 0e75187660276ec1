"""Video clips: what a clip is (``spec``), which frames it takes (``sampling``, pure) and how a
video sample becomes one (``clip_recipe``). ``make_loader(src, clips=Clips(...))``."""

from loaders.clips.clip_options import Clips, Layout, Sampling, Short
from loaders.clips.clip_recipe import ClipOut, ClipRecipe, as_clip_fields, clip_batch_keys
from loaders.clips.sampling import ClipDraw, draw_clip
from loaders.clips.video_members import media_part, video_facts

__all__ = [
    "ClipDraw",
    "ClipOut",
    "ClipRecipe",
    "Clips",
    "Layout",
    "Sampling",
    "Short",
    "as_clip_fields",
    "clip_batch_keys",
    "draw_clip",
    "media_part",
    "video_facts",
]
