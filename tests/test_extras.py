"""Every package pyproject's extras name (dev, ray, parquet, lightning: `make` installs them all)
is installed at a version the requirement accepts and can be imported; a missing one fails here
with its import error instead of making other tests skip silently."""

from __future__ import annotations

import importlib
import tomllib
from importlib import metadata
from importlib.util import find_spec

import pytest
from packaging.requirements import Requirement

from tests.conftest import REPO
from tests.support.extras import missing, modules

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
REQUIREMENTS = {
    Requirement(r).name: Requirement(r)
    for group in PYPROJECT["project"]["optional-dependencies"].values()
    for r in group
}
# Imported without a skip or a fallback by their own tests (a broken import fails those loudly)
# and slow to import (~11 s together in a fresh interpreter on 2 busy cores): found, not
# imported, here. Everything else is imported: TorchCodec and torchdata above all, which the
# code and tests used to fall back from silently.
FOUND_ONLY = {"ray", "lightning", "datasets", "scikit-learn", "scikit-image", "matplotlib"}


def _import_error(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except BaseException as exc:  # an extension failing to load raises OSError, RuntimeError...
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return None


def test_the_extras_are_read_from_pyproject() -> None:
    assert {"torchcodec", "torchdata", "hypothesis", "moto", "ray", "pyarrow"} <= set(REQUIREMENTS)


@pytest.mark.parametrize("distribution", sorted(REQUIREMENTS))
def test_extra_is_installed_and_imports(distribution: str) -> None:
    req = REQUIREMENTS[distribution]
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        missing(distribution, "not installed")
        raise  # unreachable: missing() fails or skips
    if not req.specifier.contains(version, prereleases=True):
        missing(distribution, f"version {version} does not satisfy {req}")
    if distribution in FOUND_ONLY:
        # the top-level package only: find_spec("a.b") imports a
        top = {m.split(".")[0] for m in modules(distribution)}
        errors = {m: "not found" for m in sorted(top) if find_spec(m) is None}
    else:
        errors = {m: e for m in modules(distribution) if (e := _import_error(m))}
    if errors:
        missing(distribution, "; ".join(f"import {m}: {e}" for m, e in errors.items()))


def test_torchcodec_is_a_link_of_the_decode_chain() -> None:
    """TorchCodec importable is not enough: the decode chain must have taken it."""
    from wdstool.format import decode

    if decode._torchcodec is None:
        missing("torchcodec", "wdstool.format.decode could not load it (FFmpeg libraries?)")
    assert decode._torchcodec.name == "torchcodec"
