"""``shard_writer`` is a library with a public API, as ``loaders`` is: the names a Python user of
the packing side needs import from the package, each with its own docstring, and importing it
loads no optional dependency (pyarrow, Ray)."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import shard_writer
from tests.conftest import REPO

CLI = REPO / "wdstool" / "cli"


@pytest.mark.parametrize("name", shard_writer.__all__)
def test_every_public_name_imports_and_says_what_it_does(name: str) -> None:
    obj = getattr(shard_writer, name)
    doc = inspect.getdoc(obj) or ""
    # a dataclass without a docstring gets its signature as __doc__: that does not count
    generated = doc.startswith(f"{name}(")
    assert doc and not generated, f"shard_writer.{name} has no docstring"
    assert obj.__module__.split(".")[0] in ("shard_writer", "wdstool")


def test_the_cli_calls_the_packing_side_through_its_public_api() -> None:
    """Every name a command imports from the packing side is exported: the API is what the
    commands themselves need, no private module reached into."""
    used: set[str] = set()
    for path in CLI.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shard_writer"):
                assert node.module == "shard_writer", f"{path.name} imports {node.module}"
                used |= {a.name for a in node.names}
    assert used, "no command imports shard_writer: the test reads the wrong folder"
    assert used <= set(shard_writer.__all__), used - set(shard_writer.__all__)


def test_importing_it_loads_no_optional_dependency() -> None:
    """pyarrow (parquet listings) and Ray (``engine="ray"``) are optional: with both made
    unimportable, ``import shard_writer`` still works and loads neither."""
    code = (
        "import sys; sys.modules['pyarrow'] = None; sys.modules['ray'] = None\n"
        "import shard_writer\n"
        "print(sorted(shard_writer.__all__) == shard_writer.__all__)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_the_readme_example_packs(tmp_path: Path, small_tree: Path) -> None:
    """The package docstring's example is real: pack with options, get a summary."""
    from shard_writer import PackOptions, pack

    summary = pack(str(small_tree), str(tmp_path / "shards"), PackOptions(max_count=6, workers=1))
    assert (summary.samples, summary.shards) == (16, 3)
    assert (tmp_path / "shards" / "index.json").is_file()
