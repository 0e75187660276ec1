"""The ``wdstool`` command line: thin click commands over the library, one module per command.

Each command parses its options, calls one library function and renders the result. Domain
errors are WdsToolError (click exceptions): one line on stderr, non-zero exit.
Machine-readable output (``--json``) goes to stdout; progress and chatter go to stderr.
Nothing imports this package: it is the top layer (see docs/design/architecture.md).
"""

from __future__ import annotations

import logging
import sys

import click

from wdstool import __version__
from wdstool.base.credentials import ScrubbingFilter
from wdstool.base.errors import WdsToolError
from wdstool.cli.examples import examples_cmd
from wdstool.cli.flag_words import FlagWordsFilter, flag_words
from wdstool.cli.index import index_cmd
from wdstool.cli.inspect import inspect_cmd, verify_cmd
from wdstool.cli.pack import pack_cmd
from wdstool.cli.reshard import reshard_cmd
from wdstool.cli.sample_data import sample_data_cmd
from wdstool.cli.show import show_cmd
from wdstool.cli.split import split_cmd
from wdstool.cli.stream_bench import stream_bench_cmd


class _Commands(click.Group):
    """The group: a library error that reaches it speaks the library's words for settings
    (``prefix=``); it leaves in the running command's flags (``--prefix``)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except WdsToolError as exc:
            command = self.commands.get(ctx.invoked_subcommand or "")
            if command is not None:
                exc.message = flag_words(command)(exc.message)
            raise


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="wdstool")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More log output on stderr (-vv debug, -vvv also SDK/HTTP internals; "
    "credentials are always scrubbed).",
)
def cli(verbose: int) -> None:
    """Pack image datasets into WebDataset shards and stream them into PyTorch.

    \b
    Typical use:
      wdstool sample-data data/images --images 2000 --classes 10
      wdstool pack data/images data/shards --max-count 1000
      wdstool reshard data/shards other/shards data/merged --max-count 5000
      wdstool split data/merged data/splits --fractions train=0.98,validation=0.02
      wdstool inspect data/shards
      wdstool verify data/shards
      wdstool index data/shards --dali
      wdstool show data/shards --out report
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("wdstool: %(levelname)s: %(message)s"))
    handler.addFilter(ScrubbingFilter())  # credentials never reach a log line
    command = cli.commands.get(click.get_current_context().invoked_subcommand or "")
    if command is not None:  # the library's log lines in this command's flags
        handler.addFilter(FlagWordsFilter(flag_words(command)))
    logging.basicConfig(level=level, handlers=[handler])
    if verbose < 3:  # SDK and HTTP internals only with -vvv
        for name in ("botocore", "aiobotocore", "urllib3", "s3fs", "fsspec", "aiohttp"):
            logging.getLogger(name).setLevel(max(level, logging.INFO))


for command in (
    sample_data_cmd,
    pack_cmd,
    reshard_cmd,
    split_cmd,
    inspect_cmd,
    verify_cmd,
    index_cmd,
    stream_bench_cmd,
    show_cmd,
    examples_cmd,
):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="wdstool")
