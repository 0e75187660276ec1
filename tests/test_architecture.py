"""The layering is enforced, not described: import-linter's contracts (pyproject.toml) hold, an
upward import breaks them with the contract's name, modules stay small enough to read, each
module's name is its own within its package tree, and the plan's functions take few values."""

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
        # no other loaders module, by wildcard: those the contract once missed, and one added later
        ("loaders/plan/epoch.py", "import loaders.monitor", "The epoch plan is pure"),
        ("loaders/plan/mixture.py", "from loaders.clips import Clips", "The epoch plan is pure"),
        ("loaders/plan/resume.py", "import loaders.watching", "The epoch plan is pure"),
        ("loaders/plan/epoch.py", "import loaders.newthing", "The epoch plan is pure"),
        ("wdstool/format/tar_read.py", "import PIL", "Tar, manifest and image headers"),
    ],
)
def test_an_upward_import_breaks_a_named_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    """A copy of the tree with one forbidden import added fails, naming the contract. A module
    the line imports that does not exist yet is written first (one added after the contract)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.c")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    imported = tmp_path.joinpath(*line.split()[1].split("."))
    new = imported.with_suffix(".py")
    if line.startswith("import loaders.") and not (imported.is_dir() or new.exists()):
        new.write_text('"""A loader module written later."""\n')
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # an upward import\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    assert "Contracts: " in result.stdout and " 0 broken" not in result.stdout, result.stdout
    report = " ".join(result.stdout.split("Broken contracts", 1)[1].split())  # unwrapped
    assert contract in report, result.stdout
    assert module.removesuffix(".py").replace("/", ".") + " -> " in report  # the culprit
    if contract.startswith("The epoch plan is pure"):  # the import itself, not only its imports
        assert f"loaders.plan is not allowed to import {line.split()[1]}:" in report, report


def test_modules_fit_in_a_head() -> None:
    """One idea per module: none of the library's modules is over ~400 lines (tests aside)."""
    too_long = {}
    for name in PACKAGES:
        for path in (ROOT / name).rglob("*.py"):
            n = len(path.read_text().splitlines())
            if n > MAX_LINES:
                too_long[str(path.relative_to(ROOT))] = n
    assert not too_long, f"split these by idea: {too_long}"


PACKAGE_FILES = {"__init__.py", "__main__.py"}


def repeated_module_names(package: Path) -> dict[str, list[str]]:
    """Module file names used more than once inside ``package``'s tree (a package's own
    ``__init__``/``__main__`` aside), each with where."""
    where: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        if path.name not in PACKAGE_FILES:
            where.setdefault(path.name, []).append(str(path.relative_to(package.parent)))
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_no_two_modules_of_a_package_tree_share_a_name() -> None:
    """A name says what a module holds: three ``spec.py`` in ``loaders/`` (the plan's, the
    clips', the interleaved output's) say it of none, and a traceback or a search names the
    wrong one."""
    repeated = {k: v for pkg in PACKAGES for k, v in repeated_module_names(ROOT / pkg).items()}
    assert not repeated, f"name each for what it holds: {repeated}"


def test_a_repeated_module_name_is_found(tmp_path: Path) -> None:
    for rel in ("pkg/a/spec.py", "pkg/b/c/spec.py", "pkg/a/__init__.py", "pkg/b/__init__.py",
                "pkg/a/one.py", "pkg/b/two.py"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert repeated_module_names(tmp_path / "pkg") == {
        "spec.py": ["pkg/a/spec.py", "pkg/b/c/spec.py"]
    }


MAX_PLAN_PARAMETERS = 5


def test_the_plan_s_functions_take_at_most_five_parameters() -> None:
    """The plan is pure functions of a few grouped values (``EpochSpec``, ``Topology``,
    ``PackSpec``, ``PackedData``): a sixth parameter is a setting that belongs in one of them."""
    wide = []
    for path in sorted((ROOT / "loaders" / "plan").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                a = node.args
                n = len(a.posonlyargs + a.args + a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                if n > MAX_PLAN_PARAMETERS:
                    wide.append(f"{path.relative_to(ROOT)}: {node.name} takes {n}")
    assert not wide, f"group their settings: {wide}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` names one of the project's modules or packages (C extensions too)."""
    base = ROOT.joinpath(*dotted.split("."))
    return (
        base.with_suffix(".py").exists()
        or (base / "__init__.py").exists()
        or any(base.parent.glob(base.name + ".*.so"))
        or base.with_suffix(".c").exists()
    )


def _private_uses(path: Path) -> list[str]:
    """``path``'s uses of other modules' private names: ``from X import _y``, ``import X._y``
    and ``X._y`` on a name bound to a project module. A package's own private submodules (its
    C extensions, ``from wdstool.format import _jpegcrop`` in ``wdstool/format/``) are its own."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    found: list[str] = []

    def check(dotted: str, lineno: int) -> None:
        parts = dotted.split(".")
        if parts[0] not in PACKAGES:
            return  # a third-party module's private names are its and its users' business
        for i in range(1, len(parts)):
            home, name = ".".join(parts[:i]), parts[i]
            if not name.startswith("_") or name.startswith("__") or home == me:
                continue
            if home == package and _is_module(f"{home}.{name}"):
                continue
            found.append(f"{path.relative_to(ROOT)}:{lineno}: {home}.{name}")
            return

    bound: dict[str, str] = {}  # a name in this module -> the project module it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(alias.name, node.lineno)
                top = alias.name.split(".")[0]
                bound[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            check(base, node.lineno)
            for alias in node.names:
                check(f"{base}.{alias.name}", node.lineno)
                if _is_module(f"{base}.{alias.name}"):
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                check(".".join([bound[value.id], *reversed(chain)]), node.lineno)
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    """A leading underscore means "only this module uses it": a name another module needs is
    public in its home module (or moves to where both can import it), so renaming or changing a
    private name never breaks a module that was not looking."""
    found = sorted(
        {
            use
            for name in PACKAGES
            for path in (ROOT / name).rglob("*.py")
            for use in _private_uses(path)
        }
    )
    assert not found, "make these public, or move them:\n" + "\n".join(found)


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
