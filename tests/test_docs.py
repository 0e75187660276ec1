"""The docs say what the code does: make_loader's parameters and defaults as the reference lists
them (and as the guides quote them) are the signature's; the README stays a first visit (at
most 200 lines) whose relative links all lead somewhere. The site's own links and anchors are
checked by ``mkdocs build --strict`` (``make docs``, run by CI)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import loaders

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
REFERENCE = DOCS / "reference" / "loaders.md"
BEGIN = "<!-- make_loader parameters: begin"
END = "<!-- make_loader parameters: end"
SIGNATURE = inspect.signature(loaders.make_loader)


def documented_parameters() -> list[tuple[str, str]]:
    """(name, default cell) per row of the reference's parameter table, in order."""
    text = REFERENCE.read_text()
    assert BEGIN in text and END in text, f"{REFERENCE}: the table's markers are gone"
    table = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.fullmatch(r"`(\w+)`", cells[0]) if line.startswith("|") else None
        if m:
            rows.append((m.group(1), cells[1]))
    assert rows, f"{REFERENCE}: no parameter rows between the markers"
    return rows


def default_of(cell: str) -> object:
    """A default cell: ``required`` (no default) or a Python literal in backticks."""
    if cell == "required":
        return inspect.Parameter.empty
    m = re.fullmatch(r"`(.+)`", cell)
    assert m, f"default cell {cell!r}: write `literal` or required"
    return ast.literal_eval(m.group(1))


def same(a: object, b: object) -> bool:
    """Equal and of the same type (True is not 1)."""
    return type(a) is type(b) and a == b


def test_reference_lists_every_parameter_of_make_loader_in_order() -> None:
    documented = [name for name, _ in documented_parameters()]
    actual = list(SIGNATURE.parameters)
    missing = [p for p in actual if p not in documented]
    extra = [p for p in documented if p not in actual]
    assert not missing, f"{REFERENCE.name}: make_loader parameters not documented: {missing}"
    assert not extra, f"{REFERENCE.name}: documented parameters make_loader lacks: {extra}"
    assert documented == actual, f"{REFERENCE.name}: order differs from the signature"


def test_reference_defaults_are_the_code_defaults() -> None:
    wrong = []
    for name, cell in documented_parameters():
        if name not in SIGNATURE.parameters:
            continue
        code = SIGNATURE.parameters[name].default
        if not same(default_of(cell), code):
            wrong.append(f"{name}: docs {cell}, code {code!r}")
    assert not wrong, f"{REFERENCE.name}: defaults drifted from make_loader: {wrong}"


def test_reference_signature_line_names_the_positional_parameters() -> None:
    """The line ``make_loader(source, batch_size=64, *, ...)`` above the table."""
    head = []
    for p in SIGNATURE.parameters.values():
        if p.kind is not p.POSITIONAL_OR_KEYWORD:
            break
        head.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    line = f"make_loader({', '.join(head)}, *, ...)"
    assert line in REFERENCE.read_text(), f"{REFERENCE.name} should show {line}"


# `name=value` quoted in prose as a default: "`prefetch_factor=4` (the default)",
# "(`scaled_decode=True`, the default)", "`label="cls"` (default)"
QUOTED_DEFAULT = re.compile(r"`(\w+)=([^`]+)`\s*(?:,\s*|\(\s*)(?:the\s+)?default\b")


def quoted_defaults() -> list[tuple[str, str, str]]:
    found = []
    for path in [README, *sorted(DOCS.rglob("*.md"))]:
        for m in QUOTED_DEFAULT.finditer(path.read_text()):
            if m.group(1) in SIGNATURE.parameters:
                found.append((path.relative_to(ROOT).as_posix(), m.group(1), m.group(2)))
    return found


def test_defaults_quoted_in_the_guides_are_the_code_defaults() -> None:
    found = quoted_defaults()
    assert found, "the pattern finds no quoted default: has the prose changed?"
    wrong = [
        f"{path}: {name}={value} (code: {SIGNATURE.parameters[name].default!r})"
        for path, name, value in found
        if not same(ast.literal_eval(value), SIGNATURE.parameters[name].default)
    ]
    assert not wrong, f"defaults quoted in the docs drifted from make_loader: {wrong}"


def test_quoted_default_pattern_catches_drift() -> None:
    """The check above catches what the README once said (prefetch_factor 2, code 4)."""
    text = "`prefetch_factor=2` (the\n  default) is enough"
    (m,) = QUOTED_DEFAULT.finditer(text)
    assert (m.group(1), m.group(2)) == ("prefetch_factor", "2")
    assert not same(ast.literal_eval(m.group(2)), SIGNATURE.parameters["prefetch_factor"].default)


def test_readme_is_a_first_visit() -> None:
    lines = README.read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines; move the rest into docs/ (at most 200)"


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def github_slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def readme_links() -> list[str]:
    text = re.sub(r"```.*?```", "", README.read_text(), flags=re.S)  # not inside code blocks
    return LINK.findall(text)


@pytest.mark.parametrize("target", readme_links())
def test_readme_relative_links_lead_to_files(target: str) -> None:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
        return
    path, _, anchor = target.partition("#")
    if not path:
        headings = re.findall(r"^#+\s+(.*)$", README.read_text(), flags=re.M)
        assert anchor in {github_slug(h) for h in headings}, f"README.md: no heading #{anchor}"
        return
    assert not path.startswith("/"), f"README.md: {target} is absolute; link relative to the repo"
    resolved = (ROOT / path).resolve()
    assert resolved.is_relative_to(ROOT), f"README.md: {target} leaves the repository"
    assert resolved.exists(), f"README.md links to {target}, which does not exist"


def test_readme_has_links_into_the_docs() -> None:
    targets = readme_links()
    assert any(t.startswith("docs/") for t in targets)
    assert "docs/design/how-a-batch-is-made.md" in targets


def _signature_groups() -> dict[str, list[str]]:
    """make_loader's keyword-only parameters under each ``# group`` comment of its signature."""
    src = inspect.getsource(loaders.make_loader)
    groups: dict[str, list[str]] = {}
    current = ""
    for line in src.split(") -> StreamingLoader:", 1)[0].splitlines()[1:]:
        line = line.strip()
        if line.startswith("# "):
            current = line[2:]
            groups[current] = []
        elif current and (m := re.match(r"(\w+):", line)):
            groups[current].append(m.group(1))
    return groups


def test_make_loader_documents_each_group_of_parameters() -> None:
    """The signature groups its keywords by meaning, the docstring has a section per group
    naming each of them, and the reference's table heads each group."""
    groups = _signature_groups()
    assert list(groups) == [
        "data and schema", "epoch", "recipe and output", "workers", "storage", "errors",
        "topology", "watching",
    ]  # fmt: skip
    keyword_only = [
        n for n, p in SIGNATURE.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert [n for names in groups.values() for n in names] == keyword_only
    doc = inspect.getdoc(loaders.make_loader) or ""
    sections = re.split(r"^(\S[^\n]*):$", doc, flags=re.M)[1:]
    documented = {
        title.lower(): set(re.findall(r"^    (\w+(?:, \w+)*):", body, flags=re.M))
        for title, body in zip(sections[::2], sections[1::2], strict=True)
    }
    for group, names in groups.items():
        assert group in documented, f"make_loader's docstring has no {group!r} section"
        listed = {n for entry in documented[group] for n in entry.split(", ")}
        assert set(names) <= listed, f"{group}: not documented: {set(names) - listed}"
    table = REFERENCE.read_text().split(BEGIN, 1)[1].split(END, 1)[0]
    heads = re.findall(r"^\| \*\*(.+?)\*\* \|", table, flags=re.M)
    assert heads == list(groups), f"{REFERENCE.name}: the table's group rows {heads}"
