"""The layering is enforced, not described: import-linter's contracts (pyproject.toml) hold, an
upward import breaks them with the contract's name, and modules stay small enough to read."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("wdstool", "shard_writer", "loaders")
MAX_LINES = 400


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "importlinter.cli"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [*cmd, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def test_import_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("loaders/read.py", "from wdstool.cli import main", "Layers: CLI >"),
        ("shard_writer/verify.py", "from loaders.source import resolve_source", "Layers: CLI >"),
        ("wdstool/format/manifest.py", "from loaders.plan import plan_epoch", "Layers: CLI >"),
        ("wdstool/base/retry.py", "from wdstool.format.images import kind", "Layers: CLI >"),
        ("loaders/plan/epoch.py", "import torch", "The epoch plan is pure"),
        ("wdstool/format/tar_read.py", "import PIL", "Tar, manifest and image headers"),
    ],
)
def test_an_upward_import_breaks_a_named_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    """A copy of the tree with one forbidden import added fails, naming the contract."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.c")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # an upward import\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    assert "Contracts: " in result.stdout and " 0 broken" not in result.stdout, result.stdout
    report = " ".join(result.stdout.split("Broken contracts", 1)[1].split())  # unwrapped
    assert contract in report, result.stdout
    assert module.removesuffix(".py").replace("/", ".") + " -> " in report  # the culprit


def test_modules_fit_in_a_head() -> None:
    """One idea per module: none of the library's modules is over ~400 lines (tests aside)."""
    too_long = {}
    for name in PACKAGES:
        for path in (ROOT / name).rglob("*.py"):
            n = len(path.read_text().splitlines())
            if n > MAX_LINES:
                too_long[str(path.relative_to(ROOT))] = n
    assert not too_long, f"split these by idea: {too_long}"


_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
_QUOTED = re.compile(r"`[^`]*`")  # another tool's command line (`ray start --head`) may say one
_LOG_CALLS = ("debug", "info", "warning", "error", "exception", "critical")


def test_library_errors_speak_library_words() -> None:
    """An error or log line raised below the CLI names settings as the library takes them
    (``prefix=``, ``overwrite=True``), never as a CLI flag (``--prefix``): a Python user has
    no flags, and the CLI translates (wdstool/cli/common.py, ``flag_words``)."""
    found = []
    for name in ("shard_writer", "loaders", "wdstool/format", "wdstool/base", "wdstool/show"):
        for path in sorted((ROOT / name).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                func = getattr(node.func, "id", getattr(node.func, "attr", ""))
                if not (func.endswith(("Error", "Exception")) or func in _LOG_CALLS):
                    continue
                found += [
                    f"{path.relative_to(ROOT)}:{sub.lineno}: {sub.value!r}"
                    for sub in ast.walk(node)
                    if isinstance(sub, ast.Constant)
                    and isinstance(sub.value, str)
                    and _FLAG.search(_QUOTED.sub("", sub.value))
                ]
    assert not found, "\n".join(found)
