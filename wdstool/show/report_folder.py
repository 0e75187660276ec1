"""The report's folder: ``index.html`` rendered from the package's Jinja2 template, and its
pictures, written whole or not at all.

Every piece of data-set text (keys, captions, class names, JSON fields, paths) reaches the
page through the template engine with autoescaping on, so ``<script>`` in a caption is shown as
text. Files are named by sample number, never by key. The folder is assembled under a
temporary name beside ``DIR`` and renamed into place last; a previous report in ``DIR`` is
replaced, any other non-empty folder refused before work starts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from wdstool.base.errors import ConfigError, DestinationError

NEEDS = "the HTML report (out_dir=) needs Jinja2 and matplotlib: pip install -e '.[show]'"
MARKER = ".wdstool-show"  # names a folder as a report this command may replace


def check_out_dir(out_dir: str) -> None:
    """DestinationError (before any work) unless ``out_dir`` is new, empty or a report."""
    if not os.path.exists(out_dir):
        parent = os.path.dirname(os.path.abspath(out_dir))
        if not os.path.isdir(parent):
            raise DestinationError(f"{out_dir}: its parent folder {parent} does not exist")
        return
    if not os.path.isdir(out_dir):
        raise DestinationError(f"{out_dir}: exists and is not a folder")
    entries = os.listdir(out_dir)
    if entries and MARKER not in entries:
        raise DestinationError(
            f"{out_dir}: holds other files; choose a new or empty folder (a report "
            "written there before is replaced)"
        )


def render_html(context: Mapping[str, Any]) -> str:
    try:
        from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
    except ImportError:
        raise ConfigError(NEEDS) from None

    env = Environment(
        loader=PackageLoader("wdstool.show", "templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("index.html.j2").render(**context)


def write_report(out_dir: str, html: str, files: Mapping[str, bytes]) -> None:
    """``out_dir/index.html`` and ``files`` (relative path -> bytes), all or nothing."""
    check_out_dir(out_dir)
    target = os.path.abspath(out_dir)
    parent, name = os.path.split(target)
    tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
    try:
        for rel, data in files.items():
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        # text the data set holds may carry lone surrogates (a JSON "\ud800"): escaped
        with open(
            os.path.join(tmp, "index.html"), "w", encoding="utf-8", errors="backslashreplace"
        ) as f:
            f.write(html)
        with open(os.path.join(tmp, MARKER), "w") as f:
            f.write("a report written by wdstool show; the next one replaces this folder\n")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private
        _swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap_in(tmp: str, target: str) -> None:
    if not os.path.exists(target):
        os.rename(tmp, target)
        return
    old = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.old-", dir=os.path.dirname(target))
    os.rmdir(old)
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)
