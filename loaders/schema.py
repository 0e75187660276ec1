"""What a sample carries besides its image: the label, extra fields, and a per-sample function.

``make_loader(label=..., fields=..., fields_fn=...)`` builds one :class:`SampleSchema`. It
decides which tar members a worker reads at all (the image, the label's member, the requested
fields' members; everything else is skipped unread) and turns a sample's members into its label
and field values (:mod:`wdstool.format.fields` says how each spec reads its member). A field's
``fields_fn`` runs in the workers; tensor (or numpy array) values it returns are stacked into
batch tensors, others delivered as lists aligned with ``pixel_values``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from wdstool.base.errors import ConfigError
from wdstool.format.fields import FieldError, FieldSpec, LabelSpec
from wdstool.format.images import IMAGE_EXTENSIONS, WithNumberedImages
from wdstool.format.video import VIDEO_EXTENSIONS

# batch keys the loader itself fills: no field may take one of these names
RESERVED = frozenset(
    {
        "pixel_values",
        "labels",
        "keys",
        "source",
        "valid",
        "views",
        "encoded",
        "offsets",
        "geometry",
        "video",
        "clip_span",
        "clip_index",
        "frame_mask",
        "audio",
        "audio_lengths",
        "audio_mask",
        "images",
        "image_sizes",
        "image_owner",
        "image_spans",
        "segments",
        "position_ids",
        "loss_mask",
        "cu_seqlens",
        "max_seqlen",
        "sample_row",
        "image_row",
    }
)

FieldsFn = Callable[[dict[str, Any]], Mapping[str, Any]]


@dataclass(frozen=True, kw_only=True)
class SampleSchema:
    label: LabelSpec | None = field(default_factory=lambda: LabelSpec.parse("cls"))
    fields: tuple[tuple[str, FieldSpec], ...] = ()
    fields_fn: FieldsFn | None = None
    videos: bool = False  # video members too (a clips loader), with the facts in KEY.json
    numbered: bool = False  # numbered images (KEY.0.jpg...), KEY.json and KEY.txt (interleaved)

    @classmethod
    def build(
        cls,
        label: str | None = "cls",
        fields: Mapping[str, str] | None = None,
        fields_fn: FieldsFn | None = None,
    ) -> SampleSchema:
        """Validate ``make_loader``'s arguments (ConfigError, one line, before any worker)."""
        try:
            parsed_label = None if label is None else LabelSpec.parse(label)
        except ValueError as exc:
            raise ConfigError(f"label={label!r}: {exc}") from None
        if fields is not None and not isinstance(fields, Mapping):
            raise ConfigError(
                "fields must be a dict of name -> spec, e.g. {'caption': 'txt', 'url': 'json:url'}"
            )
        parsed: list[tuple[str, FieldSpec]] = []
        for name, spec in (fields or {}).items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ConfigError(f"fields: {name!r} is not a usable batch key (use identifiers)")
            if name in RESERVED:
                raise ConfigError(
                    f"fields: {name!r} is a key the loader fills itself; choose another name"
                )
            try:
                parsed.append((name, FieldSpec.parse(spec)))
            except ValueError as exc:
                raise ConfigError(f"fields[{name!r}]: {exc}") from None
        if fields_fn is not None and not callable(fields_fn):
            raise ConfigError("fields_fn must be a callable taking a dict of the requested fields")
        return cls(label=parsed_label, fields=tuple(parsed), fields_fn=fields_fn)

    @property
    def extensions(self) -> frozenset[str]:
        """The members a worker reads: images, the label's member, the fields' members."""
        wanted = {spec.ext for _name, spec in self.fields}
        if self.label is not None:
            wanted.add(self.label.ext)
        if self.videos:
            wanted |= VIDEO_EXTENSIONS | {"json"}
        if self.numbered:
            return WithNumberedImages(IMAGE_EXTENSIONS | wanted | {"json", "txt"})
        return frozenset(IMAGE_EXTENSIONS | wanted)

    def read(self, parts: Mapping[str, bytes]) -> tuple[int | None, dict[str, Any] | None]:
        """(label, fields) of one sample; FieldError (the reason) for a bad one. Fields are
        ``None`` when none were requested."""
        cache: dict[str, Any] = {}
        label = None if self.label is None else self.label.read(parts, cache)
        if not self.fields and self.fields_fn is None:
            return label, None
        values = {name: spec.read(parts, cache) for name, spec in self.fields}
        if self.fields_fn is not None:
            try:
                out = self.fields_fn(values)
            except Exception as exc:
                raise FieldError(f"fields_fn raised {type(exc).__name__}: {exc}") from exc
            if not isinstance(out, Mapping):
                raise FieldError(f"fields_fn returned {type(out).__name__}, not a dict")
            bad = sorted(k for k in out if not isinstance(k, str) or k in RESERVED)
            if bad:
                raise FieldError(f"fields_fn returned reserved or non-string keys {bad}")
            values = dict(out)
        return label, values


@dataclass(frozen=True)
class Pad:
    """A field whose length differs between samples (token ids, audio, per-frame values):
    batched by padding every sample's value with ``value`` along ``dim`` to the batch's
    longest, with ``NAME_lengths`` (int64 [B]: each sample's length) and ``NAME_mask`` (bool
    [B, L]: True on real positions) beside it. The other dimensions and the dtype must agree."""

    value: float = 0
    dim: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise ConfigError(f"Pad: value must be a number, got {self.value!r}")
        if isinstance(self.dim, bool) or not isinstance(self.dim, int):
            raise ConfigError(f"Pad: dim must be an int, got {self.dim!r}")


def as_pads(pad_fields: Mapping[str, Pad | int | float] | None) -> dict[str, Pad]:
    """``make_loader(pad_fields=...)``: name -> Pad (a number: ``Pad(value)``)."""
    if pad_fields is None:
        return {}
    if not isinstance(pad_fields, Mapping):
        raise ConfigError("pad_fields must be a dict of field name -> Pad(value, dim) or a number")
    out = {}
    for name, pad in pad_fields.items():
        if not isinstance(name, str) or name in RESERVED:
            raise ConfigError(f"pad_fields: {name!r} is not a field name the loader can pad")
        out[name] = pad if isinstance(pad, Pad) else Pad(pad)  # type: ignore[arg-type]
    return out


def _without(shape: tuple[int, ...], dim: int) -> tuple[int, ...]:
    d = dim % len(shape) if shape else 0
    return shape[:d] + shape[d + 1 :]


class FieldBatcher:
    """Collects one batch's field values and hands them over as batch entries: tensors and numpy
    arrays stacked into a tensor (every sample's value of a name must have one shape and dtype,
    checked per sample so a mismatch is that sample's error; a padded name's length may
    differ: :class:`Pad`), everything else as a list."""

    def __init__(self, pads: Mapping[str, Pad] | None = None) -> None:
        self._shapes: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        self.pads = dict(pads or {})

    def check(self, values: Mapping[str, Any]) -> None:
        """FieldError if a tensor value's shape or dtype differs from earlier samples'."""
        for name, v in values.items():
            if not isinstance(v, torch.Tensor | np.ndarray):
                continue
            pad = self.pads.get(name)
            shape = tuple(v.shape)
            if pad is not None:
                if not shape or not -len(shape) <= pad.dim < len(shape):
                    raise FieldError(f"{name!r} of shape {list(shape)} has no dim {pad.dim} to pad")
                shape = _without(shape, pad.dim)
            got = (shape, v.dtype)
            want = self._shapes.setdefault(name, got)
            if got != want and pad is not None:
                raise FieldError(
                    f"{name!r} has shape {list(got[0])} {got[1]} apart from its padded dim "
                    f"{pad.dim}, earlier samples {list(want[0])} {want[1]}"
                )
            if got != want:
                raise FieldError(
                    f"fields_fn returned {name!r} of shape {list(got[0])} {got[1]}, earlier "
                    f"samples {list(want[0])} {want[1]} (pad to one length to batch them, or "
                    f"make_loader(pad_fields={{{name!r}: 0}}))"
                )

    def collate(self, rows: list[dict[str, Any]], names: tuple[str, ...] = ()) -> dict[str, Any]:
        """{name: stacked tensor or list} over the samples of a batch, in order: ``names``
        always (``None`` where a sample has no value), then any other name a row has; a padded
        name with its lengths and mask."""
        if not rows:
            return {}
        out: dict[str, Any] = {}
        names = tuple(dict.fromkeys([*names, *(name for r in rows for name in r)]))
        for name in names:
            column = [r.get(name) for r in rows]
            pad = self.pads.get(name)
            if pad is not None and all(isinstance(v, torch.Tensor | np.ndarray) for v in column):
                out.update(_padded(name, [torch.as_tensor(v) for v in column], pad))
            elif all(isinstance(v, torch.Tensor) for v in column):
                out[name] = torch.stack(column)
            elif all(isinstance(v, np.ndarray) for v in column):
                out[name] = torch.from_numpy(np.stack(column))
            else:
                out[name] = column
        return out


def _padded(name: str, column: list[torch.Tensor], pad: Pad) -> dict[str, torch.Tensor]:
    """``column`` padded to its longest along ``pad.dim``, with lengths and mask."""
    dim = pad.dim % column[0].dim()
    lengths = torch.tensor([v.shape[dim] for v in column], dtype=torch.int64)
    longest = int(lengths.max()) if len(column) else 0
    shape = list(column[0].shape)
    shape[dim] = longest
    batch = torch.full((len(column), *shape), pad.value, dtype=column[0].dtype)
    for i, v in enumerate(column):
        batch[i].narrow(dim, 0, v.shape[dim]).copy_(v)
    mask = torch.arange(longest)[None, :] < lengths[:, None]
    return {name: batch, f"{name}_lengths": lengths, f"{name}_mask": mask}
