"""The image types a recipe's ops take, and the exact conversions between them.

Every library has its own image type: torchvision v2 works on uint8 tensors, torchvision v1 on
PIL images or tensors (with other pixels for each: PIL's resampling is not torch's), timm on
PIL images (its RandAugment/AutoAugment/AugMix take nothing else), albumentations on HWC uint8
numpy arrays. A recipe's head hands its tail the type the pipeline was written for, and where
an op in the tail needs another type than the one before it gives, the conversion goes in
between (:func:`adapt`), so that a pipeline written for ImageFolder + PIL gets PIL images.

The conversions are the libraries' own arithmetic: ``ToTensor`` on a uint8 tensor (which it
refuses) is replaced by what it computes on the PIL image of the same pixels,
``x.to(float32).div(255)``, bit for bit; a PIL image becomes a tensor through ``pil_to_tensor``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import v2


class Kind(StrEnum):
    TENSOR = "tensor"  # a [3,H,W] tensor (uint8 from the decoder)
    PIL = "pil"  # a PIL RGB image
    NUMPY = "numpy"  # an [H,W,3] uint8 array (albumentations)


def to_pil(img: torch.Tensor) -> Image.Image:
    """A uint8 [3,H,W] tensor (any strides) as a PIL RGB image of the same pixels."""
    hwc = img.permute(1, 2, 0)
    return Image.fromarray(np.ascontiguousarray(hwc.numpy()), "RGB")


def to_hwc(img: torch.Tensor) -> np.ndarray:
    """A uint8 [3,H,W] tensor as a contiguous [H,W,3] array (albumentations' image)."""
    return np.ascontiguousarray(img.permute(1, 2, 0).numpy())


def as_kind(img: torch.Tensor, kind: Kind) -> Any:
    """A decoded uint8 [3,H,W] tensor as ``kind``."""
    if kind is Kind.PIL:
        return to_pil(img)
    if kind is Kind.NUMPY:
        return to_hwc(img)
    return img


def as_tensor(img: Any) -> Any:
    """What a recipe returns, as the [3,H,W] tensor a batch holds: a PIL image through
    ``pil_to_tensor`` (uint8), a CHW array (timm's ``ToNumpy``) or an HWC one with 3 channels
    (albumentations without ``ToTensorV2``) as a tensor; anything else unchanged (the batch's
    check names it)."""
    if isinstance(img, Image.Image):
        if img.mode != "RGB":
            img = img.convert("RGB")
        return torch.from_numpy(np.array(img)).permute(2, 0, 1)
    if isinstance(img, np.ndarray) and img.ndim == 3:
        t = torch.from_numpy(np.ascontiguousarray(img))
        if img.shape[0] != 3 and img.shape[-1] == 3:
            return t.permute(2, 0, 1)
        return t
    return img


class TensorToTensor:
    """``ToTensor`` for an image that is already a uint8 tensor: the float [0, 1] values
    ``ToTensor`` gives for the PIL image of the same pixels (``x.to(float32).div(255)``, its
    own arithmetic); a float tensor passes (timm's ``MaybeToTensor`` lets tensors pass)."""

    draws_nothing = True

    def __init__(self, replaced: Any) -> None:
        self.replaced = replaced

    def __call__(self, img: Any) -> Any:
        if isinstance(img, torch.Tensor) and img.dtype == torch.uint8:
            out = torch.empty(img.shape, dtype=torch.float32)  # planar, as ToTensor's
            return out.copy_(img).div_(255)
        return self.replaced(img)

    @property
    def label(self) -> str:
        return type(self.replaced).__name__

    def __repr__(self) -> str:
        return f"{self.label}()"


class NormalizedFloat:
    """``ToTensor`` (or timm's ``MaybeToTensor``) then ``Normalize``, in one pass: each of the
    256 values of each channel goes through the two ops once (``lut``: the user's own
    ``Normalize`` run on ``v / 255`` as ``ToTensor`` computes it), then every pixel is looked
    up. The ops are per element, so the result is theirs bit for bit; ~0.35 ms instead of
    ~0.8 ms on a 224 px crop here. Given something else than an RGB PIL image or a uint8
    [3,H,W] tensor, the two ops run as they are."""

    draws_nothing = True

    def __init__(self, to_float: Any, normalize: Any) -> None:
        self.op, self.normalize = to_float, normalize
        self.to_float = TensorToTensor(to_float)  # the fallback, for any image
        self._lut: np.ndarray | None = None

    @property
    def label(self) -> str:
        return f"{type(self.op).__name__} + {type(self.normalize).__name__}"

    def lut(self) -> np.ndarray:
        if self._lut is None:
            levels = torch.arange(256, dtype=torch.uint8).to(torch.float32).div(255)
            out = self.normalize(levels.expand(3, 1, 256).contiguous())
            self._lut = np.ascontiguousarray(out.reshape(3, 256).numpy())
        return self._lut

    def __call__(self, img: Any, out: torch.Tensor | None = None) -> Any:
        """``img`` as ``Normalize(ToTensor(img))``; into ``out`` (a float32 [3,H,W] tensor, the
        batch's slot) when given and of that size."""
        if isinstance(img, Image.Image) and img.mode == "RGB":
            hwc = np.asarray(img)
        elif isinstance(img, torch.Tensor) and img.dtype == torch.uint8 and img.ndim == 3:
            hwc = img.permute(1, 2, 0).numpy()
        else:
            return self.normalize(self.to_float(img))
        lut = self.lut()
        if out is None or tuple(out.shape) != (3, *hwc.shape[:2]) or not out.is_contiguous():
            out = torch.empty((3, *hwc.shape[:2]), dtype=torch.float32)
        planes = out.numpy()
        for c in range(3):
            np.take(lut[c], hwc[..., c], out=planes[c])
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_lut": None}

    def __repr__(self) -> str:
        return f"NormalizedFloat({self.op!r}, {self.normalize!r})"


class ToPIL:
    """Converts a uint8 tensor to the PIL image an op needs; passes a PIL image."""

    draws_nothing = True

    def __call__(self, img: Any) -> Any:
        if isinstance(img, torch.Tensor):
            return to_pil(img)
        return img

    label = "ToPIL"

    def __repr__(self) -> str:
        return "ToPIL()"


# what an op does to the image type (each adapter registers its library's ops by name)
@dataclass(frozen=True)
class Rule:
    """``needs``: the type the op must be given (None: any); ``makes``: the type it returns
    (None: the type it was given); ``on_tensor``: for an op that needs a PIL image, what
    computes its result from a uint8 tensor of the same pixels without the round trip
    (``op -> callable``, or None: give it a PIL image)."""

    needs: Kind | None = None
    makes: Kind | None = None
    on_tensor: Callable[[Any], Callable[[Any], Any]] | None = None


_RULES: dict[type, Rule] = {}


def register(classes: Iterable[type], rule_: Rule) -> None:
    """Declare the image types of ops by class (exact type: a subclass may do otherwise)."""
    for cls in classes:
        _RULES[cls] = rule_


def rule(op: Any) -> Rule:
    """``op``'s :class:`Rule` (an empty one for what is not registered)."""
    return _RULES.get(type(op), _NONE)


_NONE = Rule()


def needs_pil(ops: Iterable[Any]) -> bool:
    """The pipeline was written for PIL input: an op needs a PIL image before any op makes one
    (``ToPILImage``: the pipeline converts tensors itself)."""
    for op in ops:
        r = rule(op)
        if r.needs is Kind.PIL:
            return True
        if r.makes is Kind.PIL:
            return False
    return False


def adapt(ops: Iterable[Callable[[Any], Any]], kind: Kind) -> tuple[Callable[[Any], Any], ...]:
    """``ops`` as they run on an image of ``kind``: an op that needs a PIL image and is given
    a tensor runs its tensor form (``Rule.on_tensor``: a ``ToTensor`` becomes
    :class:`TensorToTensor`) or gets a PIL image (:class:`ToPIL` before it); the rest
    unchanged."""
    out: list[Callable[[Any], Any]] = []
    current: Kind | None = kind
    ops = list(ops)
    for i, op in enumerate(ops):
        if rule(op) is TO_FLOAT and i + 1 < len(ops) and type(ops[i + 1]) in NORMALIZE:
            ops[i + 1] = NormalizedFloat(op, ops[i + 1])  # the pair in one pass
            continue
        if isinstance(op, NormalizedFloat):
            out.append(op)
            current = Kind.TENSOR
            continue
        r = rule(op)
        if r.needs is Kind.PIL and current is Kind.TENSOR:
            if r.on_tensor is not None:
                out.append(r.on_tensor(op))
                current = r.makes or current
                continue
            out.append(ToPIL())
            current = Kind.PIL
        out.append(op)
        if r.makes is not None:
            current = r.makes
    return tuple(out)


def _same(op: Any) -> Callable[[Any], Any]:
    return _Passes(op)


class _Passes:
    """A ``PILToTensor`` given a uint8 tensor: it is one already."""

    draws_nothing = True

    def __init__(self, replaced: Any) -> None:
        self.replaced = replaced

    def __call__(self, img: Any) -> Any:
        return img if isinstance(img, torch.Tensor) else self.replaced(img)

    @property
    def label(self) -> str:
        return type(self.replaced).__name__

    def __repr__(self) -> str:
        return f"{self.label}()"


TO_FLOAT = Rule(Kind.PIL, Kind.TENSOR, TensorToTensor)  # ToTensor: PIL -> float [0, 1]
NORMALIZE = (T.Normalize, v2.Normalize)  # per element, per channel: fused after a ToTensor
TO_UINT8 = Rule(Kind.PIL, Kind.TENSOR, _same)  # PILToTensor: PIL -> uint8
PIL_ONLY = Rule(Kind.PIL)  # PIL in, PIL out
MAKES_PIL = Rule(makes=Kind.PIL)  # ToPILImage

register([T.ToTensor, v2.ToTensor], TO_FLOAT)
register([T.PILToTensor], TO_UINT8)
register([T.ToPILImage, v2.ToPILImage], MAKES_PIL)


__all__ = [
    "MAKES_PIL",
    "PIL_ONLY",
    "TO_FLOAT",
    "TO_UINT8",
    "Kind",
    "Rule",
    "TensorToTensor",
    "ToPIL",
    "adapt",
    "as_kind",
    "as_tensor",
    "needs_pil",
    "register",
    "rule",
    "to_hwc",
    "to_pil",
]
