"""The map of the code (docs/design/architecture.md) stays true, and so do the paths and names
that docs/design/how-a-batch-is-made.md gives.

The rule, written on the page too:

- every library folder (a directory holding an ``__init__.py`` under ``wdstool/``,
  ``shard_writer/`` or ``loaders/``) is named on the page by its path in backticks, with a
  trailing slash (``loaders/kinds/``);
- every module of those folders (``__init__.py`` aside) is named by its path in backticks
  (``loaders/batch.py``), unless its folder is marked as a group: the folder's path in
  backticks followed by `` (group)`` (``loaders/recipe/` (group)``), which maps every module
  directly inside it;
- every path either page names in backticks (ending in ``.py`` or ``/``) exists, so a module
  removed or renamed breaks the page until it is updated;
- every name the "Where does this rule live?" table of how-a-batch-is-made.md gives after a
  module path (``loaders/batch.py``, ``BatchAssembler._rng``) occurs in that module.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "design" / "architecture.md"
BATCH_PAGE = ROOT / "docs" / "design" / "how-a-batch-is-made.md"
PACKAGES = ("wdstool", "shard_writer", "loaders")

NAMED_PATH = re.compile(r"`([\w.-]+(?:/[\w.-]+)*(?:\.py|/))`")
GROUP = re.compile(r"`([\w.-]+(?:/[\w.-]+)*/)` \(group\)")


def library_folders() -> list[Path]:
    """Every directory with an ``__init__.py`` under the three packages (theirs included)."""
    return sorted(
        init.parent
        for package in PACKAGES
        for init in (ROOT / package).rglob("__init__.py")
        if "__pycache__" not in init.parts
    )


def library_modules() -> list[Path]:
    return sorted(
        module
        for folder in library_folders()
        for module in folder.glob("*.py")
        if module.name != "__init__.py"
    )


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def named_paths(page: Path) -> set[str]:
    return set(NAMED_PATH.findall(page.read_text()))


def unmapped(page: Path) -> list[str]:
    """The library folders and modules ``page`` does not name (see the module's rule)."""
    named = named_paths(page)
    groups = set(GROUP.findall(page.read_text()))
    missing = [rel(f) + "/" for f in library_folders() if rel(f) + "/" not in named]
    missing += [
        rel(m)
        for m in library_modules()
        if rel(m) not in named and rel(m.parent) + "/" not in groups
    ]
    return missing


def test_the_map_names_every_library_folder_and_module() -> None:
    missing = unmapped(ARCHITECTURE)
    assert not missing, (
        f"{rel(ARCHITECTURE)} does not name {missing}: add each to its package's table (or mark "
        "its folder `(group)` and name the module in the group's line)"
    )


def test_the_map_sees_a_new_module(tmp_path: Path) -> None:
    """The rule itself: a module the page does not name, in a folder that is not a group, is
    reported by its path; one inside a group's folder is mapped by the group."""
    page = tmp_path / "map.md"
    text = ARCHITECTURE.read_text()
    already = set(unmapped(ARCHITECTURE))  # reported by the test above
    page.write_text(text.replace("`loaders/batch.py`", "`loaders/batch`"))
    assert set(unmapped(page)) - already == {"loaders/batch.py"}
    assert "`loaders/recipe/` (group)" in text
    page.write_text(text.replace("`loaders/recipe/` (group)", "`loaders/recipe/`"))
    assert "loaders/recipe/fuse.py" in unmapped(page)


def test_every_path_the_design_pages_name_exists() -> None:
    gone = [
        f"{rel(page)}: {path}"
        for page in (ARCHITECTURE, BATCH_PAGE)
        for path in sorted(named_paths(page))
        if not (ROOT / path).exists()
    ]
    assert not gone, f"the design pages name paths that do not exist: {gone}"


def rule_homes() -> list[tuple[str, str, str]]:
    """(rule, module path, name) for each name the rule table gives after a module path."""
    table = BATCH_PAGE.read_text().split("## Where does this rule live?", 1)[1]
    found = []
    for line in table.splitlines():
        if not line.startswith("| ") or line.startswith("| rule "):
            continue
        rule, home = (c.strip() for c in line.strip().strip("|").rsplit("|", 1))
        module = None
        for token in re.findall(r"`([^`]+)`", home):
            if token.endswith(".py"):
                module = token
            elif module is not None and re.fullmatch(r"[A-Za-z_][\w.]*", token):
                found.append((rule, module, token))
    return found


def test_the_names_the_rule_table_gives_are_in_their_modules() -> None:
    homes = rule_homes()
    assert len(homes) > 20, "the rule table's names were not found: has its layout changed?"
    wrong = []
    for rule, module, name in homes:
        path = ROOT / module
        source = path.read_text() if path.exists() else ""
        parts = [p for p in name.split(".") if p]
        if not all(re.search(rf"\b{re.escape(p)}\b", source) for p in parts):
            wrong.append(f"{rule}: {module} has no {name}")
    assert not wrong, f"{rel(BATCH_PAGE)}'s rule table drifted from the code: {wrong}"
