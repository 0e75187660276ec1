"""The library speaks of its settings in its own words (``prefix=``, ``overwrite=True``); the
CLI says the same things in its flags (``--prefix``, ``--overwrite``): errors and log lines,
one translation, keyed on each command's own options."""

from __future__ import annotations

from pathlib import Path

import pytest

from shard_writer import PackOptions
from tests.conftest import jpeg_bytes, png_bytes, run_cli
from wdstool.base.errors import ConfigError
from wdstool.cli import cli
from wdstool.cli.flag_words import flag_words


@pytest.mark.parametrize(
    ("command", "library", "cli_says"),
    [
        ("pack", "prefix='a/b': use letters", "--prefix 'a/b': use letters"),
        ("pack", "workers=0: must be >= 1", "--workers 0: must be >= 1"),
        (
            "pack",
            "append=True adds a version, overwrite=True replaces it: choose one",
            "--append adds a version, --overwrite replaces it: choose one",
        ),
        (
            "pack",
            "choose another prefix=, or move it away",
            "choose another --prefix, or move it away",
        ),
        (
            "pack",
            "name the path column with path_column=",
            "name the path column with --path-column",
        ),
        ("pack", "shuffle=False keeps the order", "--no-shuffle keeps the order"),
        ("pack", "quality=Q re-encodes", "--quality Q re-encodes"),
        ("reshard", "keys=/k.txt: no such file", "--keys /k.txt: no such file"),
        ("reshard", "1 key(s) of exclude_keys= name no", "1 key(s) of --exclude-keys name no"),
        (
            "stream-bench",
            "exact=True with scaled_decode=False",
            "--compare exact with --exact-decode",
        ),
        # stream-bench's --transform is the parameter transform_spec: the flag's own name is a
        # library word too
        ("stream-bench", "transform='x': not a preset", "--transform 'x': not a preset"),
        ("show", "the HTML report (out_dir=) needs Jinja2", "the HTML report (--out) needs Jinja2"),
        # what is not a whole word stays: paths, URLs, other commands' settings, other words
        ("pack", "/data/seed=3/a.jpg: unreadable", "/data/seed=3/a.jpg: unreadable"),
        ("pack", "s3://b/x.csv?prefix=a: no rows", "s3://b/x.csv?prefix=a: no rows"),
        ("pack", "image_size=3 and transform='x'", "image_size=3 and transform='x'"),
        ("pack", "prefix 'train' is taken", "prefix 'train' is taken"),
    ],
)
def test_library_words_become_the_commands_flags(command: str, library: str, cli_says: str) -> None:
    assert flag_words(cli.commands[command])(library) == cli_says


def test_an_error_reads_in_library_words_from_python_and_in_flags_from_the_cli(
    tmp_path: Path,
) -> None:
    """Same error, same type and exit code (2: a bad option), two vocabularies."""
    with pytest.raises(ConfigError) as caught:
        PackOptions(prefix="a/b")
    assert caught.value.message == "prefix='a/b': use letters, digits, '_', '-', '.'"
    (tmp_path / "src" / "c").mkdir(parents=True)
    (tmp_path / "src" / "c" / "a.jpg").write_bytes(jpeg_bytes(1))
    r = run_cli(
        "pack", str(tmp_path / "src"), str(tmp_path / "out"), "--prefix", "a/b", check=False
    )
    assert r.returncode == 2
    assert r.stderr == "Error: --prefix 'a/b': use letters, digits, '_', '-', '.'\n"
    assert not (tmp_path / "out").exists()


def test_a_library_warning_reads_in_flags_on_the_cli(tmp_path: Path) -> None:
    """pack's warning about images in several formats names the setting that fixes it: the
    CLI's log line says --quality, the library's record says quality=."""
    (tmp_path / "a.jpg").write_bytes(jpeg_bytes(1))
    (tmp_path / "b.png").write_bytes(png_bytes(2))
    (tmp_path / "l.csv").write_text("path\na.jpg\nb.png\n")
    r = run_cli("pack", str(tmp_path / "l.csv"), str(tmp_path / "out"), "--workers", "1", "-q")
    warnings = [line for line in r.stderr.splitlines() if "formats" in line]
    assert len(warnings) == 1 and warnings[0].startswith("wdstool: WARNING: "), r.stderr
    assert warnings[0].endswith("--quality Q re-encodes every image as JPEG (KEY.jpg)")
