"""A bad listing is one line on stderr naming the file and the row, a non-zero exit, and nothing
written to DEST. Every case runs the real CLI in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, jpeg_bytes, run_cli
from tests.shard_writer.test_listing import write_listing

IMG = "a.jpg"


def _one_line_error(tmp_path: Path, src: Path | str, *extra: str, code: int = 1) -> str:
    dest = tmp_path / "out"
    r = run_cli("pack", str(src), str(dest), "--workers", "1", *extra, check=False)
    assert r.returncode == code, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: "), r.stderr
    assert "Traceback" not in r.stderr
    assert not dest.exists() or not any(dest.iterdir())  # nothing published, nothing half-written
    return r.stderr.strip()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / IMG).write_bytes(jpeg_bytes(1))
    (tmp_path / "b.jpg").write_bytes(jpeg_bytes(2))
    return tmp_path


# name -> (file name, content, what the one line must say after "Error: <file>: ")
TEXT_CASES = {
    "no path column": (
        "l.csv",
        "file,label\na.jpg,x\n",
        "no 'path' column (columns found: 'file', 'label'); name the path column with --path-column",
    ),
    "no path column (jsonl)": (
        "l.jsonl",
        '{"image": "a.jpg", "y": 1}\n',
        "no 'path' column (columns found: 'image', 'y')",
    ),
    "empty csv": ("l.csv", "", "empty file"),
    "blank csv": ("l.csv", "\n\n", "empty file"),
    "header only": ("l.csv", "path,label\n", "no rows"),
    "empty jsonl": ("l.jsonl", "\n  \n", "no rows"),
    "duplicate path": (
        "l.csv",
        "path\na.jpg\nb.jpg\n./a.jpg\n",
        "duplicate path './a.jpg' in row 1 (line 2) and row 3 (line 4)",
    ),
    "empty path": ("l.csv", "path,label\na.jpg,1\n,2\n", "row 2 (line 3): empty path"),
    "empty csv label": (
        "l.csv",
        "path,label\na.jpg,x\nb.jpg,\n",
        "row 2 (line 3): label (empty) is neither an int nor a name",
    ),
    "float label": (
        "l.jsonl",
        '{"path": "a.jpg", "label": 1}\n{"path": "b.jpg", "label": 1.5}\n',
        "row 2: label 1.5 (float) is neither an int nor a name",
    ),
    "negative label": (
        "l.jsonl",
        '{"path": "a.jpg", "label": -1}\n',
        "row 1: label -1 (int) is neither an int nor a name",
    ),
    "bool label": (
        "l.jsonl",
        '{"path": "a.jpg", "label": true}\n',
        "row 1: label True (bool) is neither an int nor a name",
    ),
    "null label": (
        "l.jsonl",
        '{"path": "a.jpg", "label": 0}\n{"path": "b.jpg", "label": null}\n',
        "row 2: label (empty) is neither an int nor a name",
    ),
    "missing label": (
        "l.jsonl",
        '{"path": "a.jpg", "label": "x"}\n{"path": "b.jpg"}\n',
        "row 2: label (empty) is neither an int nor a name",
    ),
    "list label": (
        "l.jsonl",
        '{"path": "a.jpg", "label": [1]}\n',
        "row 1: label [1] (list) is neither an int nor a name",
    ),
    "dict label": (
        "l.jsonl",
        '{"path": "a.jpg", "label": {"a": 1}}\n',
        "row 1: label {'a': 1} (dict) is neither an int nor a name",
    ),
    "ints mixed with names": (
        "l.jsonl",
        '{"path": "a.jpg", "label": 3}\n\n{"path": "b.jpg", "label": "cat"}\n',
        "row 2 (line 3): label 'cat' is neither an int nor a name like the others (row 1 has 3;",
    ),
    "bad csv quoting": (
        "l.csv",
        'path,caption\na.jpg,"ok"\nb.jpg,"bad"quote\n',
        "row 2 (line 3) does not parse: ',' expected after '\"'",
    ),
    "unterminated quote": ("l.csv", 'path,caption\na.jpg,"never closed\n', "row 1 (line 2)"),
    "wrong number of fields": (
        "l.tsv",
        "path\tlabel\na.jpg\t1\nb.jpg\t2\textra\n",
        "row 2 (line 3) has 3 fields, the header has 2",
    ),
    "bad json line": (
        "l.jsonl",
        '{"path": "a.jpg"}\n{"path": "b.jpg",}\n',
        "row 2 is not valid JSON: Expecting property name enclosed in double quotes (column 18)",
    ),
    "json line not an object": ("l.jsonl", '["a.jpg"]\n', "row 1 is not a JSON object (list)"),
    "NaN in json": ("l.jsonl", '{"path": "a.jpg", "s": NaN}\n', "row 1 is not valid JSON: NaN"),
    "path not text": ("l.jsonl", '{"path": 7}\n', "row 1: path 7 is not text (int)"),
    "caption not text": (
        "l.jsonl",
        '{"path": "a.jpg", "caption": ["x"]}\n',
        "row 1: caption ['x'] is not text (list)",
    ),
    "not utf-8": ("l.csv", b"path\n\xff.jpg\n", "not UTF-8 text (byte 5: b'\\xff')"),
    "duplicate header": ("l.csv", "path,x,x\na.jpg,1,2\n", "column 'x' appears twice"),
}


@pytest.mark.parametrize("case", list(TEXT_CASES), ids=list(TEXT_CASES))
def test_bad_listing_is_one_line_naming_file_and_row(folder: Path, case: str) -> None:
    name, content, expected = TEXT_CASES[case]
    listing = folder / name
    if isinstance(content, bytes):
        listing.write_bytes(content)
    else:
        listing.write_text(content, encoding="utf-8")
    msg = _one_line_error(folder, listing)
    assert msg.startswith(f"Error: {listing}: "), msg
    assert expected in msg, msg


def test_unknown_format_and_other_sources(tmp_path: Path) -> None:
    odd = tmp_path / "list.xyz"
    odd.write_text("path\na.jpg\n")
    assert _one_line_error(tmp_path, odd) == (
        f"Error: {odd}: unknown listing format '.xyz' (use .csv, .tsv, .json, .jsonl or .parquet)"
    )
    plain = tmp_path / "README"
    plain.write_text("x")
    msg = _one_line_error(tmp_path, plain)
    assert msg == (
        f"Error: {plain}: neither a directory (an ImageFolder tree SRC/<class>/<image>) "
        "nor a listing file (use .csv, .tsv, .json, .jsonl or .parquet)"
    )
    missing = tmp_path / "nope.csv"
    assert _one_line_error(tmp_path, missing) == f"Error: {missing}: no such listing file"
    assert "no such directory or listing file" in _one_line_error(tmp_path, tmp_path / "nope")


def test_column_options(folder: Path) -> None:
    listing = write_listing(folder / "l.csv", [{"path": IMG, "label": "x"}])
    msg = _one_line_error(folder, listing, "--caption-column", "text")
    assert msg.endswith(
        "no 'text' column (columns found: 'path', 'label'); "
        "name the caption column with --caption-column"
    )
    msg = _one_line_error(folder, listing, "--label-column", "path", code=2)
    assert "must differ" in msg
    tree = folder / "tree"
    (tree / "c").mkdir(parents=True)
    (tree / "c" / IMG).write_bytes(jpeg_bytes(1))
    msg = _one_line_error(folder, tree, "--path-column", "file", code=2)
    assert "apply to a listing SRC" in msg


def test_parquet_values_json_cannot_hold(folder: Path) -> None:
    import datetime

    blob = write_listing(folder / "b.parquet", [{"path": IMG, "raw": b"\x00\x01"}])
    msg = _one_line_error(folder, blob)
    assert msg == (
        f"Error: {blob}: row 1: column 'raw' holds bytes values, which KEY.json cannot hold "
        "(drop or convert the column)"
    )
    span = write_listing(folder / "d.parquet", [{"path": IMG, "wait": datetime.timedelta(1)}])
    assert "column 'wait' holds timedelta values" in _one_line_error(folder, span)
    nan = write_listing(folder / "n.parquet", [{"path": IMG, "score": float("nan")}])
    assert "row 1: column 'score' holds nan, which JSON cannot hold" in _one_line_error(folder, nan)
    junk = folder / "j.parquet"
    junk.write_bytes(b"PAR1 this is not parquet")
    assert "not a readable parquet file" in _one_line_error(folder, junk)


def test_parquet_without_pyarrow_names_the_extra(folder: Path) -> None:
    listing = write_listing(folder / "l.parquet", [{"path": IMG}])
    code = "import sys; sys.modules['pyarrow'] = None; from wdstool.cli import main; main()"
    r = subprocess.run(
        [sys.executable, "-c", code, "pack", str(listing), str(folder / "out")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"Error: {listing}: reading a .parquet listing needs pyarrow: pip install -e '.[parquet]'"
    )
