"""What the project's extras promise a `make` install (pyproject's optional dependencies, all of
them installed by the Makefile's venv): a test that needs one fails when it is missing instead of
skipping silently, unless the missing extra is named in ``WDSTOOL_MISSING_EXTRAS`` (e.g.
``WDSTOOL_MISSING_EXTRAS=torchcodec`` on a machine without FFmpeg's shared libraries): then it is
a skip that says so."""

from __future__ import annotations

import os

import pytest

ENV = "WDSTOOL_MISSING_EXTRAS"

# distribution -> the modules the code and tests import from it (default: the name, - as _)
MODULES = {
    "moto": ("moto", "moto.server"),
    "import-linter": ("importlinter",),
    "pytest-xdist": ("xdist",),
    "scikit-image": ("skimage",),
    "scikit-learn": ("sklearn",),
    "torchdata": ("torchdata.stateful_dataloader",),
    "torchcodec": ("torchcodec.decoders",),
    "pyarrow": ("pyarrow", "pyarrow.parquet"),
    "ray": ("ray",),
    "lightning": ("lightning.pytorch",),
    "mkdocs-material": ("material",),
    "mkdocstrings-python": ("mkdocstrings_handlers.python",),
    "mkdocs-click": ("mkdocs_click",),
    "prometheus-client": ("prometheus_client",),
    "tensorboard": ("tensorboard", "torch.utils.tensorboard"),
}


def modules(distribution: str) -> tuple[str, ...]:
    return MODULES.get(distribution, (distribution.replace("-", "_"),))


def allowed_missing(distribution: str) -> bool:
    names = os.environ.get(ENV, "").replace(",", " ").split()
    return distribution in names


def missing(distribution: str, why: str) -> None:
    """A test needs ``distribution`` and it is not usable: fail, or skip where allowed."""
    message = f"{distribution} is promised by pyproject's extras but not usable: {why}"
    if allowed_missing(distribution):
        pytest.skip(f"{message} ({ENV} names it)")
    pytest.fail(f"{message} (install it, or set {ENV}={distribution} to skip its tests)")
