"""MkDocs hooks (``hooks:`` in mkdocs.yml).

- Figures the benchmarks write into ``bench/results/`` are published with the docs from where
  they are made, so a page always shows the figure of the last run of the command it names (no
  copy under ``docs/`` to fall behind).
- The command line reference (mkdocs-click) keeps click's ``\\b`` paragraphs as ``--help``
  prints them (examples, lists of commands): mkdocs-click drops the marker and Markdown would
  run their lines together, so they become preformatted blocks. This wraps a private function
  of mkdocs-click 0.9; where it is gone, the page is built as mkdocs-click writes it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

# site path -> the file in the repository that a benchmark command writes
FIGURES = {
    "guides/stream-bench.png": "bench/results/stream-bench.png",
}
NO_REWRAP = "\b"  # click's marker: the paragraph after it is printed as written


def click_blocks(lines: Iterator[str]) -> Iterator[str]:
    """A ``\\b`` line and the lines up to the next blank one -> a ``text`` code block."""
    block: list[str] | None = None
    for line in lines:
        if block is not None:
            if line.strip():
                block.append(line)
                continue
            yield from ["```text", *block, "```"]
            block = None
        if line.strip() == NO_REWRAP:
            block = []
        else:
            yield line
    if block is not None:
        yield from ["```text", *block, "```", ""]


def on_config(config: Any) -> Any:
    try:
        from mkdocs_click import _docs
    except ImportError:
        return config
    original: Callable[..., Iterator[str]] | None = getattr(_docs, "_make_description", None)
    if original is not None and not getattr(original, "click_blocks", False):

        @functools.wraps(original)
        def described(*args: Any, **kwargs: Any) -> Iterator[str]:
            return click_blocks(original(*args, **kwargs))

        described.click_blocks = True  # type: ignore[attr-defined]
        _docs._make_description = described
    return config


def on_files(files: Files, config: Any) -> Files:
    root = Path(config.config_file_path).parent
    for uri, source in FIGURES.items():
        files.append(File.generated(config, uri, abs_src_path=str(root / source)))
    return files
