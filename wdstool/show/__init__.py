"""``wdstool show``: look at a data set without extracting it.

A report of a few drawn samples (contact sheet, labels, captions), the same samples as the
loader delivers them to the model, and the data set's statistics, read from the manifest and
the samples' headers only (ranged reads on S3). Beside the CLI, above ``loaders`` (what the
model sees) and ``wdstool.format`` (headers, tar members): see DESIGN.md.

>>> from wdstool.show import ShowConfig, build_report
>>> summary = build_report("data/shards", ShowConfig(samples=32), out_dir="report")
"""

from typing import Any

from wdstool.show.show_config import ShowConfig

__all__ = ["ShowConfig", "build_report"]


def __getattr__(name: str) -> Any:
    # torch and the loaders load on first use, not when the CLI starts
    if name == "build_report":
        from wdstool.show.report import build_report

        return build_report
    raise AttributeError(name)
