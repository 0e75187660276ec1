"""One place for every default: each option of a command that has a setting in the library
(an options dataclass, a function's keyword) defaults to the library's value, and the help
shows it. A CLI default that drifts from the library's fails here."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import click
import pytest

from loaders.bench.run import BenchConfig
from loaders.make import make_loader
from shard_writer import (
    IndexOptions,
    PackOptions,
    ReshardOptions,
    generate_sample_data,
    inspect_dataset,
)
from wdstool.cli import cli
from wdstool.cli.writing import options_from
from wdstool.show.show_config import ShowConfig


def _parsed(command: str, *args: str) -> dict[str, Any]:
    """The options as the command receives them when none is given (its defaults, parsed)."""
    cmd = cli.commands[command]
    with cmd.make_context(command, list(args)) as ctx:
        return dict(ctx.params)


def _defaults(owner: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(owner):
        return {
            f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(owner)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        }
    return {
        n: p.default
        for n, p in inspect.signature(owner).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


@pytest.mark.parametrize(
    ("command", "args", "options"),
    [
        ("pack", ("SRC", "DEST"), PackOptions),
        ("reshard", ("SRC", "DEST"), ReshardOptions),
        ("split", ("SRC", "DEST", "--fractions", "a=1"), ReshardOptions),
    ],
)
def test_writers_build_the_librarys_default_options(command: str, args: tuple, options) -> None:
    """The options object a writing command builds from no options is the library's default
    object, field for field (pack skips bad inputs, reshard and split raise)."""
    params = _parsed(command, *args)
    assert options_from(options, params) == options()
    shared = {f.name for f in dataclasses.fields(options)} & set(params)
    assert {"max_count", "max_size", "prefix", "workers", "on_error", "quality"} <= shared


@pytest.mark.parametrize(
    ("command", "args", "owner", "renamed"),
    [
        ("sample-data", ("DEST",), generate_sample_data, {}),
        ("inspect", ("SRC",), inspect_dataset, {}),
        ("stream-bench", ("SRC",), BenchConfig, {"transform_name": "transform_spec"}),
        # the loader's options; None: the benchmark's own default (224, uint8, one rank of
        # one, passed to make_loader explicitly), --repeats (the benchmark's runs) and --field
        # (NAME=SPEC items, not the mapping)
        (
            "stream-bench",
            ("SRC",),
            make_loader,
            dict.fromkeys(("image_size", "output", "world_size", "rank", "repeats", "fields")),
        ),
        ("show", ("SRC",), ShowConfig, {}),
        ("index", ("SRC", "--out", "DIR"), IndexOptions, {}),
    ],
)
def test_other_commands_default_to_the_librarys_settings(
    command: str, args: tuple, owner: Any, renamed: dict[str, str | None]
) -> None:
    params = _parsed(command, *args)
    library = _defaults(owner)
    shared = {name: renamed.get(name, name) for name in library}
    shared = {name: cli_name for name, cli_name in shared.items() if cli_name in params}
    assert shared, f"{command}: no option shares a name with its library settings"
    for name, cli_name in shared.items():
        value = library[name]
        value = getattr(value, "value", value)  # an enum, as the CLI spells it
        assert params[cli_name] == value, (
            f"{command} --{cli_name}: {params[cli_name]!r} != {value!r}"
        )


def test_the_help_shows_the_librarys_defaults() -> None:
    pack = cli.commands["pack"]
    text = pack.get_help(click.Context(pack, info_name="pack"))
    assert f"[default: {PackOptions().max_count}; x>=1]" in " ".join(text.split())
    assert "[default: 256.0 MB]" in " ".join(text.split())  # a byte count, as a size
    reshard = cli.commands["reshard"]
    text = " ".join(reshard.get_help(click.Context(reshard, info_name="reshard")).split())
    assert f"[default: {ReshardOptions().on_error.value}]" in text


def test_a_library_option_has_no_second_default() -> None:
    from wdstool.cli.defaults import LibraryDefault

    with pytest.raises(TypeError, match="do not give another"):
        LibraryDefault(["--max-count"], library="shard_writer:PackOptions", default=5)
