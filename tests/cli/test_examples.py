"""``wdstool examples``: a guide's torchrun line names a script of the clone from any folder."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO, run_cli


def test_examples_lists_every_script_with_what_it_does(tmp_path: Path) -> None:
    out = run_cli("examples", cwd=tmp_path).stdout.splitlines()
    names = [line.split()[0] for line in out]
    assert names == sorted(p.stem for p in (REPO / "examples").glob("*.py"))
    assert all(len(line.split()) > 3 for line in out)  # a name and what it does


def test_an_example_s_path_works_from_another_folder(tmp_path: Path) -> None:
    path = Path(run_cli("examples", "vlm_packed_train", cwd=tmp_path).stdout.strip())
    assert path == REPO / "examples" / "vlm_packed_train.py" and path.is_file()
    assert Path(run_cli("examples", "train_ddp.py", cwd=tmp_path).stdout.strip()).is_file()


def test_an_unknown_example_is_one_line_naming_the_known_ones(tmp_path: Path) -> None:
    proc = run_cli("examples", "train_dpp", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0
    assert "train_dpp: no such example" in proc.stderr and "train_ddp" in proc.stderr
