"""``wdstool examples``: the clone's example scripts, listed, or one's path for torchrun.

The scripts live in the clone's ``examples/`` folder, not in the packages; a guide's command
names one as ``"$(wdstool examples NAME)"`` so that it runs from whatever folder the reader is
in (their data there, the script in the clone).
"""

from __future__ import annotations

import ast
from pathlib import Path

import click

import wdstool
from wdstool.base.errors import ConfigError


def examples_dir() -> Path:
    """The clone's ``examples/`` (the project is installed from the clone: ``make venv``)."""
    return Path(wdstool.__file__).resolve().parents[1] / "examples"


def _summary(script: Path) -> str:
    """The first sentence of the script's docstring (up to its first colon)."""
    doc = ast.get_docstring(ast.parse(script.read_text())) or ""
    first = " ".join(doc.strip().split("\n\n")[0].split())
    return first.split(": ")[0].split(". ")[0].rstrip(".")


@click.command("examples")
@click.argument("name", required=False)
def examples_cmd(name: str | None) -> None:
    """List the example training scripts, or print the path of one (NAME, with or without .py).

    \b
    For example, from any folder:
      wdstool examples
      torchrun --standalone --nproc_per_node=2 "$(wdstool examples vlm_packed_train)" --help
    """
    folder = examples_dir()
    if not folder.is_dir():
        raise ConfigError(
            f"{folder}: no examples folder: the scripts ship with the clone "
            "(git clone, then make venv), not with an installed wheel"
        )
    scripts = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    if name is None:
        width = max(len(p.stem) for p in scripts)
        for p in scripts:
            click.echo(f"{p.stem:<{width}}  {_summary(p)}")
        click.echo(f"\n(in {folder}; `wdstool examples NAME` prints one's path)", err=True)
        return
    script = folder / (name if name.endswith(".py") else f"{name}.py")
    if not script.is_file():
        known = ", ".join(p.stem for p in scripts)
        raise ConfigError(f"{name}: no such example (there are: {known})")
    click.echo(str(script))
