"""What a recipe gives, learnt before any sample runs: its tail (or unfused pipeline) run on grey
test images, for the output's size and dtype the batch buffers are made for, and for the
one-line error of a library op that refuses what it is given."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from PIL import Image

from loaders.recipe.fuse import op_name
from loaders.recipe.imagetypes import as_kind, as_tensor
from loaders.recipe.schedule import Size
from loaders.recipe.seeding import Seeder, Where, draws_from_globals
from wdstool.base.errors import ConfigError

log = logging.getLogger(__name__)

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


def _run_probe(recipe: Any, size: Size) -> torch.Tensor:
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


def probe(recipe: Any) -> tuple[Size | None, torch.dtype | None]:
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
        if recipe.head is not None and not draws_from_globals(failed.op):
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


__all__ = ["PROBES", "check_output", "probe"]
