"""Every Python and shell block of README.md, docs/index.md and docs/guides/ runs as written
(tests/docs/snippets.py says how), or says in the page's source why it cannot run here."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.snippets import (
    GIVEN,
    PAGES,
    ROOT,
    Block,
    Namespace,
    blocks,
    free_names,
    names,
    unknown_names,
)

pytestmark = pytest.mark.timeout(600)
BIN = Path(sys.executable).parent


def _page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _run_shell(block: Block, cwd: Path, env: dict[str, str]) -> None:
    code = block.code
    command = ["bash", "-e", "-o", "pipefail", "-c", code]
    if block.as_file:
        name, command_line = block.as_file
        (cwd / name).write_text(code)
        command = ["bash", "-e", "-o", "pipefail", "-c", command_line]
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, (
        f"{block.where}: exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
        f"\n--- stderr\n{proc.stderr[-3000:]}"
    )


def _reader_env() -> dict[str, str]:
    """A reader's shell: the venv's ``bin/`` first on PATH (as ``source .venv/bin/activate``
    puts it), nothing else of the suite's (no PYTHONPATH: the project is importable because the
    venv installed it)."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTEST_CURRENT_TEST"}}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(BIN.parent)
    return env


FIRST_VISIT = {"README.md", "docs/index.md"}  # make test runs these; make test-full every page


def _pages() -> list[object]:
    """Every page; the guides' runs (~6 minutes of the suite's CPU on 2 cores) are ``full``
    tests, the README and the index (a first visit) run in ``make test`` too."""
    return [
        page if _page_id(page) in FIRST_VISIT else pytest.param(page, marks=pytest.mark.full)
        for page in PAGES
    ]


@pytest.mark.parametrize("page", _pages(), ids=_page_id)
def test_every_block_of_the_page_runs_in_an_empty_folder(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page runs top to bottom as a reader runs it: in a new, empty folder (not the clone),
    making the data it uses itself; the first block that fails fails the page."""
    runnable = [b for b in blocks(page) if b.lang and b.skip_reason is None]
    if not runnable:
        pytest.skip(f"{_page_id(page)}: no runnable block")
    cwd = tmp_path / "reader"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    env = _reader_env()
    ns = Namespace(__name__="__snippet__")
    try:
        for block in runnable:
            if block.lang == "bash" or block.as_file:
                _run_shell(block, cwd, env)
                continue
            unknown = unknown_names(block)
            assert not unknown, f"{block.where}: reads {sorted(unknown)}, defined nowhere before it"
            try:
                exec(compile(block.code, block.where, "exec"), ns)
            except Exception as exc:
                raise AssertionError(f"{block.where}: {type(exc).__name__}: {exc}") from exc
    finally:
        # the page's loaders go now, with their workers: a worker forked later (the next
        # page's) would inherit their batch slots' shared memory and keep it alive
        ns.clear()
        gc.collect()


def test_every_skip_says_why() -> None:
    vague = [
        b.where
        for page in PAGES
        for b in blocks(page)
        if b.skip_reason is not None and len(b.skip_reason.split()) < 3
    ]
    assert not vague, f"skipped blocks without a reason: {vague}"


def test_every_directive_is_one_the_runner_knows() -> None:
    odd = [
        f"{b.where}: {b.directive}"
        for page in PAGES
        for b in blocks(page)
        if b.directive and b.skip_reason is None and b.as_file is None
    ]
    assert not odd, f"unknown snippet directives: {odd}"


def test_a_renamed_name_fails_the_page(tmp_path: Path) -> None:
    """What the runner is for: a guide quoting a name the code no longer has fails."""
    page = tmp_path / "guide.md"
    page.write_text("```python\nfrom loaders import make_loaderr\n```\n")
    (block,) = blocks(page)
    with pytest.raises(ImportError, match="make_loaderr"):
        exec(compile(block.code, "guide.md", "exec"), Namespace())


def test_the_givens_say_what_they_stand_for() -> None:
    assert all(len(what.split()) >= 2 for what, _ in GIVEN.values())


def test_pip_install_lines_name_extras_the_project_has() -> None:
    """Not on a package index: installs are from the clone (`pip install -e '.[video]'`), and
    every extra named exists in pyproject.toml."""
    import re
    import tomllib

    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    wrong = []
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            where = f"{_page_id(page)}:{n}"
            for m in re.finditer(r"pip install ([^#`\n]*)", line):
                if True:
                    for spec in re.findall(r"'([^']*)'|\"([^\"]*)\"|(\S+)", m.group(1)):
                        spec = next(s for s in spec if s)
                        if spec.startswith("-"):
                            continue
                        name, _, extra = spec.partition("[")
                        if name in {"wdstool"}:
                            wrong.append(f"{where}: {spec} (not on an index: -e '.[...]')")
                        for e in extra.rstrip("]").split(","):
                            if name == "." and e and e not in extras:
                                wrong.append(f"{where}: extra {e!r} is not in pyproject.toml")
    assert not wrong, wrong


CONTINUES = "run in order in one folder"


def test_a_page_whose_blocks_lean_on_each_other_says_so() -> None:
    """A reader who pastes the third block alone gets a NameError or a missing folder: a page
    with more than one runnable block says, before its first, that they run in order in one
    folder (and, where Python blocks share names, in one session)."""
    silent = []
    for page in PAGES:
        runnable = [b for b in blocks(page) if b.lang and b.skip_reason is None]
        if len(runnable) < 2:
            continue
        before = "\n".join(page.read_text().splitlines()[: runnable[0].line - 1])
        if CONTINUES not in " ".join(before.split()):
            silent.append(_page_id(page))
    assert not silent, f"pages that do not say their blocks {CONTINUES!r}: {silent}"


def _fragments() -> list[tuple[Block, set[str]]]:
    """Each runnable Python block that reads names of the reader's own script (GIVEN) which
    the page did not make before it, with those names."""
    found = []
    for page in PAGES:
        earlier: set[str] = set()
        for b in blocks(page):
            if b.lang != "python" or b.skip_reason is not None:
                continue
            theirs = (free_names(b.code) - earlier) & set(GIVEN)
            if theirs:
                found.append((b, theirs))
            earlier |= names(b.code)[0]
    return found


def test_a_fragment_says_which_names_are_the_reader_s() -> None:
    """Pasted alone, a block reading ``model`` fails with a NameError: a block that uses names
    of the reader's own training script says so in its first line (``# a fragment: model,
    device and epochs are your script's``), naming each."""
    unmarked = []
    for block, theirs in _fragments():
        first = block.code.splitlines()[0]
        said = set(re.findall(r"\w+", first))
        if not (first.startswith("#") and "fragment" in first and theirs <= said):
            unmarked.append(f"{block.where}: {sorted(theirs)}")
    assert not unmarked, f"fragments whose first line does not name what they need: {unmarked}"
