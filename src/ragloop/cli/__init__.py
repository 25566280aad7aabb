"""The ragloop command line: thin commands over the public API; rich output only here."""

from __future__ import annotations

import click

from ragloop.cli.agent_loop import agent_loop
from ragloop.cli.ask import ask
from ragloop.cli.eval import eval_command
from ragloop.cli.ingest import ingest
from ragloop.cli.kb import kb_group
from ragloop.cli.search import search
from ragloop.cli.traces import traces_group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ragloop", prog_name="ragloop")
def main() -> None:
    """ragloop: retrieval loops that notice a miss, try again, and show why."""


main.add_command(ingest)
main.add_command(search)
main.add_command(kb_group)
main.add_command(agent_loop)
main.add_command(eval_command)
main.add_command(ask)
main.add_command(traces_group)
