"""The fault suite: every case records what happened; the summary prints a table.

``make test`` runs each randomized case a few times; ``make faults`` sets ``WDSTOOL_FAULT_RUNS``
higher and writes the table to ``build/faults.md`` (``WDSTOOL_FAULT_TABLE``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

SCALE = max(1, int(os.environ.get("WDSTOOL_FAULT_RUNS", "1")))
_ROWS: dict[str, Row] = {}


@dataclass
class Row:
    case: str
    runs: int = 0
    recovered: int = 0  # finished with the exact expected data
    clear_errors: int = 0  # stopped with our one-line error naming the file/URL
    lost: int = 0  # samples that should have come and did not
    duplicates: int = 0  # samples that came more often than they should
    hangs: int = 0  # hang-prone cases run under pytest-timeout: a hang fails the suite
    unpickles: int = 0


class Recorder:
    def __init__(self, case: str) -> None:
        self.row = _ROWS.setdefault(case, Row(case))

    def recovered(self, lost: int = 0, duplicates: int = 0, n: int = 1) -> None:
        self.row.runs += n
        self.row.recovered += n
        self.row.lost += lost
        self.row.duplicates += duplicates

    def clear_error(self, message: str, names: str | tuple[str, ...]) -> None:
        """Count a clean failure after checking it is one line naming one of ``names``."""
        names = (names,) if isinstance(names, str) else names
        assert "\n" not in message.strip(), message
        assert "Traceback" not in message, message
        assert any(n in message for n in names), (message, names)
        self.row.runs += 1
        self.row.clear_errors += 1

    def unpickled(self) -> None:
        self.row.unpickles += 1


@pytest.fixture
def record(request):
    """``record("case name")`` -> a Recorder for that row of the table."""
    return Recorder


def runs(base: int) -> int:
    """How many randomized runs of a case: ``base`` in ``make test``, more in ``make faults``."""
    return base * SCALE


def _table() -> str:
    head = "| case | runs | recovered | clear error | lost | duplicates | hangs | unpickles |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in _ROWS.values():
        lines.append(
            f"| {r.case} | {r.runs} | {r.recovered} | {r.clear_errors} | {r.lost} | "
            f"{r.duplicates} | {r.hangs} | {r.unpickles} |"
        )
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter) -> None:
    if not _ROWS:
        return
    terminalreporter.section("fault suite")
    terminalreporter.write_line(_table())
    target = os.environ.get("WDSTOOL_FAULT_TABLE")
    if target:
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_table() + "\n")
        path.with_suffix(".json").write_text(
            json.dumps([asdict(r) for r in _ROWS.values()], indent=2)
        )
