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
from wdstool.format.images import IMAGE_EXTENSIONS

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
    }
)

FieldsFn = Callable[[dict[str, Any]], Mapping[str, Any]]


@dataclass(frozen=True, kw_only=True)
class SampleSchema:
    label: LabelSpec | None = field(default_factory=lambda: LabelSpec.parse("cls"))
    fields: tuple[tuple[str, FieldSpec], ...] = ()
    fields_fn: FieldsFn | None = None

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


class FieldBatcher:
    """Collects one batch's field values and hands them over as batch entries: tensors and numpy
    arrays stacked into a tensor (every sample's value of a name must have one shape and dtype,
    checked per sample so a mismatch is that sample's error), everything else as a list."""

    def __init__(self) -> None:
        self._shapes: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}

    def check(self, values: Mapping[str, Any]) -> None:
        """FieldError if a tensor value's shape or dtype differs from earlier samples'."""
        for name, v in values.items():
            if not isinstance(v, torch.Tensor | np.ndarray):
                continue
            got = (tuple(v.shape), v.dtype)
            want = self._shapes.setdefault(name, got)
            if got != want:
                raise FieldError(
                    f"fields_fn returned {name!r} of shape {list(got[0])} {got[1]}, earlier "
                    f"samples {list(want[0])} {want[1]} (pad to one length to batch them)"
                )

    @staticmethod
    def collate(rows: list[dict[str, Any]], names: tuple[str, ...] = ()) -> dict[str, Any]:
        """{name: stacked tensor or list} over the samples of a batch, in order: ``names``
        always (``None`` where a sample has no value), then any other name a row has."""
        if not rows:
            return {}
        out: dict[str, Any] = {}
        names = tuple(dict.fromkeys([*names, *(name for r in rows for name in r)]))
        for name in names:
            column = [r.get(name) for r in rows]
            if all(isinstance(v, torch.Tensor) for v in column):
                out[name] = torch.stack(column)
            elif all(isinstance(v, np.ndarray) for v in column):
                out[name] = torch.from_numpy(np.stack(column))
            else:
                out[name] = column
        return out
