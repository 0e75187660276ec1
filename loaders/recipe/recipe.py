"""The recipe object: a sample's encoded image in, the tensor the model sees out.

A :class:`Recipe` has the three parts of DESIGN.md's "Recipes": a geometric ``head`` whose
parameters are drawn from the image header and the sample's generator and which the decoder
executes (only the region is decoded, ``loaders.recipe.render``); a ``tail`` of ops run in the
worker on the small uint8 crop, seeded per sample (``loaders.recipe.seeding``); and the device
step, which stays the user's (``normalize``, MixUp/CutMix on the device batch). The built-in
train and eval recipes are two recipes (:func:`build_recipe` with ``transform=None``); any
torchvision v2 pipeline is split into the three (``loaders.recipe.fuse``); a pipeline that
does not start with a fusable op runs whole on the decoded image, seeded the same way.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import v2

from loaders.recipe import kernels
from loaders.recipe.adapters import split
from loaders.recipe.fuse import op_name
from loaders.recipe.geometry import Geometry, Head, Size, eval_head, train_head
from loaders.recipe.imagetypes import Kind, NormalizedFloat, as_kind, as_tensor
from loaders.recipe.libhead import LibHead
from loaders.recipe.render import apply, render
from loaders.recipe.schedule import as_size
from loaders.recipe.seeding import Seeder, Where
from wdstool.base.errors import ConfigError
from wdstool.format.decode import PARTIAL_DECODE, decode_hwc, decode_rgb, header_size
from wdstool.format.images import MAX_PIXELS, is_jpeg

DEFAULT_SIZE = 224
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    """What turns one sample's image bytes into the model's tensor (see the module's docstring).

    ``head``: the fused geometric part (None: the image is decoded whole and ``tail`` runs on
    it): a torchvision v2 :class:`Head` drawn from the sample's ``random.Random``, or another
    library's :class:`LibHead` drawn by that library's own functions from the seeded global
    generators; ``tail``: the ops run after it, in order; ``size``: the output (h, w) where
    every sample has the same (None: it depends on the image, or on an opaque callable);
    ``dtype``: the output's (uint8, or float32 for a pipeline that ends in
    ToTensor/ToDtype/Normalize; None: not known before a sample runs); ``stopped_by``: the op
    that kept the pipeline from being fused; ``name``: "train"/"eval" for the built-in
    recipes; ``kind``: the image type the pipeline was written for (what the tail, or an
    unfused pipeline, is given); ``library``: who wrote it."""

    head: Head | LibHead | Any
    tail: tuple[Callable[[Any], Any], ...] = ()
    size: Size | None = None
    dtype: torch.dtype | None = torch.uint8
    stopped_by: str | None = None
    name: str | None = None
    kind: Kind = Kind.TENSOR
    library: str = "torchvision v2"

    @property
    def fused(self) -> bool:
        return self.head is not None

    @property
    def opaque(self) -> bool:
        """The tail holds callables other than torchvision's transforms (a function, a
        ``Lambda``, another library's transform), or the head is drawn by another library:
        they may draw from Python's or numpy's generators too, which are then seeded as
        well."""
        return any(_opaque(op) for op in self.tail) or (
            getattr(self.head, "seeded", False) and self.head.opaque  # type: ignore[union-attr]
        )

    @cached_property
    def run_tail(self) -> Callable[[Any], Any] | None:
        """The tail as one callable (None: no tail)."""
        if not self.tail:
            return None
        return self.tail[0] if len(self.tail) == 1 else v2.Compose(list(self.tail))

    def draw(
        self,
        data: bytes,
        rng: random.Random,
        *,
        max_pixels: int = MAX_PIXELS,
        where: str = "",
    ) -> Geometry | None:
        """The sample's geometry from its header (None without a head)."""
        if self.head is None:
            return None
        width, height = header_size(data, max_pixels=max_pixels, where=where)
        return self.head.draw(height, width, rng)

    def __call__(
        self,
        data: bytes,
        rng: random.Random,
        seeder: Seeder,
        out: torch.Tensor | None = None,
        *,
        partial: bool = PARTIAL_DECODE,
        scaled: bool = True,
        max_pixels: int = MAX_PIXELS,
        where: str = "",
    ) -> torch.Tensor:
        """One sample: the head drawn from ``rng`` (a JPEG's from its header, and only its region
        decoded), written into ``out`` when given; then the tail, seeded from ``rng``. The
        result is ``out`` itself unless a tail made a new tensor."""
        head = self.head
        if getattr(head, "seeded", False):  # another library's head: its own draws
            lib = (head, data, rng, seeder, out, partial, scaled, max_pixels, where)
            return self._library_sample(*lib)
        if out is not None and out.dtype != torch.uint8:
            out = None  # a v2 head writes uint8 pixels; the tail's float result is copied
        if head is None:
            img = as_kind(decode_rgb(data, max_pixels=max_pixels, where=where), self.kind)
        elif partial and is_jpeg(data):
            geometry = self.draw(data, rng, max_pixels=max_pixels, where=where)
            img = render(
                data, geometry, out, partial=True, scaled=scaled, max_pixels=max_pixels, where=where
            )
        else:  # channels-last: the resize kernels run ~3x faster on it
            img = decode_hwc(data, max_pixels=max_pixels, where=where)
            img = apply(img, head.draw(img.shape[-2], img.shape[-1], rng), out)
        return self.finish(img, rng, seeder)

    def finish(self, img: Any, rng: random.Random, seeder: Seeder) -> torch.Tensor:
        """The tail on ``img`` (the head's output), seeded from ``rng``; ``img`` without one."""
        run = self.run_tail
        if run is None:
            return as_tensor(img)
        kernels.install()  # bit-identical, faster uint8 sharpness/solarize (once)
        return as_tensor(seeder(run, img, rng.getrandbits(63)))

    def _library_sample(
        self,
        head: Any,
        data: bytes,
        rng: random.Random,
        seeder: Seeder,
        out: torch.Tensor | None,
        partial: bool,
        scaled: bool,
        max_pixels: int,
        where: str,
    ) -> torch.Tensor:
        """A sample through another library's head: its draws (the library's own functions on
        the header's size), the decode of what they need, then the tail, all from one seed of
        the global generators, in the order the library's pipeline makes them. A float
        ``out`` (the batch's slot) takes the tail's ToTensor + Normalize straight away."""
        width, height = header_size(data, max_pixels=max_pixels, where=where)
        if self.tail:
            kernels.install()
        into = out if out is not None and out.dtype == torch.float32 else None

        def decode(g: Geometry) -> Any:
            return head.render(
                data, g, partial=partial, scaled=scaled, max_pixels=max_pixels, where=where
            )

        def tail(img: Any) -> torch.Tensor:
            for op in self.tail:
                img = (
                    op(img, into)
                    if isinstance(op, NormalizedFloat) and into is not None
                    else op(img)
                )
            return as_tensor(img)

        return seeder.staged(rng.getrandbits(63), lambda: head.draw(height, width), decode, tail)

    def at_size(self, size: Size, output: str = "uint8") -> Recipe:
        """The same recipe with its fused crop's output size replaced by ``size`` (an epoch of
        a size schedule); the tail is probed again for its output."""
        if self.name is not None:
            return build_recipe(None, train=self.name == "train", image_size=size)
        if self.head is None:
            raise ConfigError(
                f"a size schedule replaces the size of the recipe's fused crop, and this one has "
                f"none ({self.describe()}); start the pipeline with a crop, or use a fixed size"
            )
        try:
            head = self.head.with_size(size)
        except ValueError as exc:
            raise ConfigError(f"a size schedule: {exc}") from None
        return _probed(replace(self, head=head, size=size), output)

    def describe(self) -> str:
        """One line: the library, what the decoder does and what runs in the workers."""
        tail = ", ".join(op_name(op) for op in self.tail)
        if self.head is None:
            first = f"{self.stopped_by} comes first" if self.stopped_by else "no geometric op"
            on = "" if self.kind is Kind.TENSOR else f" as {_KIND_WORDS[self.kind]}"
            return (
                f"{self.library} pipeline, not fused ({first}): whole-image decode, then in "
                f"the workers{on}: {tail}"
            )
        text = f"fused into the decoder: {self.head.describe()}"
        if self.name is not None:
            text = f"built-in {self.name} recipe, {text}"
        else:
            text = f"{self.library} pipeline, {text}"
        return text + (f"; then in the workers on the crop: {tail}" if tail else "")

    def __str__(self) -> str:
        return self.describe()


_KIND_WORDS = {Kind.PIL: "PIL images", Kind.NUMPY: "HWC arrays", Kind.TENSOR: "tensors"}
_CONTAINERS = (
    v2.Compose,
    v2.RandomApply,
    v2.RandomChoice,
    v2.RandomOrder,
    T.Compose,
    T.RandomApply,
    T.RandomChoice,
    T.RandomOrder,
)


def _opaque(op: Any) -> bool:
    """``op`` is not a torchvision transform (nor a container of only those)."""
    if isinstance(op, v2.Lambda | T.Lambda):
        return True
    if getattr(op, "draws_nothing", False):  # the conversions of loaders.recipe.imagetypes
        return False
    if isinstance(op, _CONTAINERS):
        return any(_opaque(t) for t in op.transforms)
    return not (isinstance(op, torch.nn.Module) and type(op).__module__.startswith("torchvision."))


# the grey test images an unfused pipeline is probed on: two aspects, so that an output size
# that depends on the image shows
PROBES = ((300, 400), (450, 280))


def _describe_image(img: Any) -> str:
    if isinstance(img, torch.Tensor):
        return f"a {str(img.dtype).replace('torch.', '')} tensor {list(img.shape)}"
    if isinstance(img, Image.Image):
        return f"a PIL {img.mode} image"
    return type(img).__name__


class _OpFailed(Exception):
    """A library's own op refused the image it was given (see :func:`_run_probe`)."""

    def __init__(self, op: Any, img: Any, exc: Exception) -> None:
        super().__init__(op, img, exc)
        self.op, self.img, self.exc = op, img, exc


def _run_ops(ops: tuple[Callable[[Any], Any], ...]) -> Callable[[Any], Any]:
    def run(img: Any) -> Any:
        for op in ops:
            try:
                img = op(img)
            except Exception as exc:
                raise _OpFailed(op, img, exc) from exc
        return img

    return run


def _run_probe(recipe: Recipe, size: Size) -> torch.Tensor:
    # a fused head hands its tail what the head says (a PIL head may hand a tensor)
    kind = recipe.kind if recipe.head is None else getattr(recipe.head, "hands", recipe.kind)
    img = as_kind(torch.full((3, *size), 128, dtype=torch.uint8), kind)
    out = as_tensor(Seeder(Where.MAIN, recipe.opaque)(_run_ops(recipe.tail), img, 0))
    check_output(out, "transform, on a grey test image", None)
    return out


def _refused(failed: _OpFailed) -> ConfigError:
    """One line naming a library op that cannot take what it was given, and the fix."""
    name, got = op_name(failed.op), _describe_image(failed.img)
    hint = "check the pipeline's order of conversions"
    if "float" in str(failed.exc) and isinstance(failed.img, torch.Tensor):
        hint = (
            "put ToDtype(torch.float32, scale=True) (v2) or ToTensor() (v1) before it, or drop "
            "it and normalize on the device (loaders.normalize)"
        )
    return ConfigError(
        f"transform: {name} cannot take {got} ({type(failed.exc).__name__}: "
        f"{' '.join(str(failed.exc).split())[:160]}); {hint}"
    )


def _probe(recipe: Recipe) -> tuple[Size | None, torch.dtype | None]:
    """The recipe's output size and dtype, from runs on grey images: the tail's on one of the
    head's size, an unfused pipeline's on two of other shapes (its size where both agree).
    Where a library's op after a fused head refuses its image: a ConfigError naming it; where
    other ops fail on those images: the head's size and uint8, or nothing known for an
    unfused pipeline (each sample is checked anyway)."""
    if not recipe.tail:
        return recipe.size, torch.uint8
    if recipe.head is not None and recipe.size is None:
        return None, None
    try:
        if recipe.head is not None:
            outs = [_run_probe(recipe, recipe.size)]  # type: ignore[arg-type]
        else:
            outs = [_run_probe(recipe, size) for size in PROBES]
    except ConfigError:
        raise
    except _OpFailed as failed:
        # a library's op after the fused head gets what every sample's gets (an unfused
        # pipeline's probe images are of sizes of ours, which its ops may rightly refuse)
        if recipe.head is not None and not _opaque(failed.op):
            raise _refused(failed) from None
        log.debug("transform: %s failed on a grey test image: %s", op_name(failed.op), failed.exc)
        return (recipe.size, torch.uint8) if recipe.head is not None else (None, None)
    except Exception as exc:  # a real sample will say it, naming itself
        log.debug("transform: its ops failed on a grey test image: %s", exc)
        return (recipe.size, torch.uint8) if recipe.head is not None else (None, None)
    shapes = {tuple(o.shape[-2:]) for o in outs}
    dtypes = {o.dtype for o in outs}
    size = shapes.pop() if len(shapes) == 1 else None
    return size, dtypes.pop() if len(dtypes) == 1 else None  # type: ignore[return-value]


def check_output(img: Any, where: str, dtype: torch.dtype | None) -> None:
    """A transform's output must be a [3,H,W] uint8 (or, with ``dtype`` float32, float32)
    tensor: ConfigError naming ``where`` otherwise."""
    ok = isinstance(img, torch.Tensor) and img.ndim == 3 and img.shape[0] == 3
    allowed = (torch.uint8, torch.float32) if dtype is None else (dtype,)
    if ok and img.dtype in allowed:
        return
    got = (
        f"{img.dtype} {list(img.shape)}".replace("torch.", "")
        if isinstance(img, torch.Tensor)
        else type(img).__name__
    )
    want = " or ".join(str(d).replace("torch.", "") for d in allowed)
    raise ConfigError(
        f"{where}: the transform returned {got}; it must return a {want} [3,H,W] tensor"
        + (" (normalize on the device, or pass output='float')" if dtype == torch.uint8 else "")
    )


def build_recipe(
    transform: Callable[[Any], Any] | None,
    *,
    train: bool = True,
    image_size: int | tuple[int, int] | None = None,
    output: str = "auto",
) -> Recipe:
    """The recipe ``make_loader`` runs: the built-in train or eval one (``transform=None``, at
    ``image_size``, default 224), or ``transform`` split by its library's adapter
    (``loaders.recipe.adapters``). ConfigError for a transform that is not callable or holds a
    batch-level op, an ``image_size`` that contradicts its output size (fused or not), or a
    float output where ``output="uint8"`` (``"auto"``: whatever the pipeline gives)."""
    if transform is None:
        size = as_size(DEFAULT_SIZE if image_size is None else image_size)
        head = train_head(size) if train else eval_head(size)
        return Recipe(head, size=size, name="train" if train else "eval")
    if not callable(transform):
        raise ConfigError(
            f"transform={transform!r} is not callable: give a torchvision (v2 or v1), timm or "
            "albumentations pipeline, or a function of a uint8 [3,H,W] tensor"
        )
    parts = split(transform)
    recipe = _probed(
        Recipe(
            parts.head,
            parts.tail,
            parts.head.size if parts.head is not None else None,
            stopped_by=parts.stopped_by,
            kind=parts.kind,
            library=parts.library,
        ),
        output,
    )
    size = recipe.size
    if image_size is not None and size is not None and as_size(image_size) != size:
        what = recipe.head.describe() if recipe.head is not None else recipe.library
        raise ConfigError(
            f"image_size={image_size!r} but the transform ({what}) outputs {size[0]}x{size[1]}; "
            "leave image_size out (the pipeline sets the size)"
        )
    return recipe


def _probed(recipe: Recipe, output: str) -> Recipe:
    """``recipe`` with the output size and dtype its ops give (runs on test images)."""
    size, dtype = _probe(recipe)
    if dtype is not None and dtype != torch.uint8 and output == "uint8":
        raise ConfigError(
            f"transform: its output is {str(dtype).replace('torch.', '')} (ToTensor/ToDtype/"
            "Normalize in the pipeline) but output='uint8': end the pipeline at uint8 and "
            "normalize on the device (loaders.normalize), or pass output='float' (the default, "
            "output='auto', follows the pipeline)"
        )
    return replace(recipe, size=size, dtype=dtype)


__all__ = ["DEFAULT_SIZE", "Recipe", "as_size", "build_recipe", "check_output"]
