"""What a report shows: one frozen object, validated up front; its defaults are the CLI's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wdstool.base.errors import ConfigError
from wdstool.format.fields import FieldSpec, LabelSpec

if TYPE_CHECKING:  # the loaders (and torch) load when a report is built, not with the CLI
    from loaders.recipe.presets import Choice

HEADERS_PER_SAMPLE = 4  # default header_samples: up to this many per shown sample, ...
WALK_SHARE = 0.5  # ... reading at most this share of the bytes of the sample they follow


@dataclass(frozen=True, kw_only=True)
class Column:
    """One column of what the model sees: a recipe at an epoch."""

    title: str
    choice: Choice
    epoch: int


@dataclass(frozen=True, kw_only=True)
class ShowConfig:
    """``samples`` drawn with ``seed``; ``epochs`` of the ``transform`` recipe (a preset name or
    ``module:attr``, see ``loaders.recipe.presets``) and the ``eval_transform`` one (None: no
    eval column) at ``image_size``; the ``label`` spec (None: no labels) and ``fields`` as
    (name, spec) pairs (default: the ``.txt`` member as ``caption``); ``header_samples`` more
    samples' headers for the statistics (None: up to ``HEADERS_PER_SAMPLE`` after each shown
    sample, reading at most ``WALK_SHARE`` of that sample's bytes: large data sets' reads stay
    within 1.5x what is shown, small samples get fewer headers read)."""

    samples: int = 64
    seed: int = 0
    epochs: int = 2
    transform: str = "default"
    eval_transform: str | None = "eval"
    image_size: int = 224
    label: str | None = "cls"
    fields: tuple[tuple[str, str], ...] = ()
    header_samples: int | None = None

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ConfigError(f"samples must be >= 1, got {self.samples}")
        if self.seed < 0:
            raise ConfigError(f"seed must be >= 0, got {self.seed}")
        if self.epochs < 0:
            raise ConfigError(f"epochs must be >= 0, got {self.epochs}")
        if self.image_size < 8:
            raise ConfigError(f"image_size must be >= 8, got {self.image_size}")
        if self.header_samples is not None and self.header_samples < 0:
            raise ConfigError(f"header_samples must be >= 0, got {self.header_samples}")
        names = [n for n, _ in self.fields]
        if len(set(names)) != len(names) or not all(names):
            raise ConfigError(f"fields need distinct, non-empty names, got {names}")
        self.label_spec  # noqa: B018 (parse now: a bad spec is an error before any work)
        self.field_specs  # noqa: B018

    @property
    def label_spec(self) -> LabelSpec | None:
        if self.label is None:
            return None
        try:
            return LabelSpec.parse(self.label)
        except ValueError as exc:
            raise ConfigError(f"label: {exc}") from None

    @property
    def field_specs(self) -> tuple[tuple[str, FieldSpec], ...]:
        pairs = self.fields or (("caption", "txt"),)
        out = []
        for name, spec in pairs:
            try:
                out.append((name, FieldSpec.parse(spec)))
            except ValueError as exc:
                raise ConfigError(f"field {name}: {exc}") from None
        return tuple(out)

    @property
    def walks(self) -> tuple[int, float | None]:
        """(samples whose headers are read for the statistics besides the shown ones, the
        share of a shown sample's bytes the walk after it may read, None: no limit)."""
        if self.header_samples is None:
            return HEADERS_PER_SAMPLE * self.samples, WALK_SHARE
        return self.header_samples, None

    def columns(self) -> tuple[Column, ...]:
        """The views' columns: each epoch of the training recipe, then the eval recipe;
        ConfigError for a recipe that is neither a preset nor an importable pipeline."""
        from loaders.recipe.presets import resolve_transform

        train = resolve_transform(self.transform, self.image_size)
        cols = [
            Column(title=f"{train.name}, epoch {e}", choice=train, epoch=e)
            for e in range(self.epochs)
        ]
        if self.eval_transform:
            evaluation = resolve_transform(self.eval_transform, self.image_size)
            cols.append(Column(title=evaluation.name, choice=evaluation, epoch=0))
        return tuple(cols)
