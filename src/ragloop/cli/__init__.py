"""The ragloop command line: thin commands over the public API; rich output only here.

Each command lives in its own module, imported only when that command runs (or shows its own
help): ``ragloop --help`` lists them from the one-line summaries below and loads nothing else,
so it answers at once. tests/test_startup.py keeps each summary equal to its command's.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import click

# name -> (module:attribute, the command's one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "ask": (
        "ragloop.cli.ask:ask",
        "Answer QUESTION from the knowledge base, showing each iteration of the loop.",
    ),
    "config": (
        "ragloop.cli.config:config_group",
        "Show the effective settings (ragloop.toml and the environment), make API keys.",
    ),
    "eval": (
        "ragloop.cli.eval:eval_command",
        "Compare one-shot retrieval with the loops on DATASET (HotpotQA, IRCoT, MuSiQue, BEIR "
        "or simple JSONL), at equal k, with paired significance tests.",
    ),
    "ingest": (
        "ragloop.cli.ingest:ingest",
        "Ingest files and folders (txt, md, rst, html, json, jsonl, csv, pdf).",
    ),
    "kb": ("ragloop.cli.kb:kb_group", "Inspect and manage the knowledge base."),
    "mcp": (
        "ragloop.cli.mcp:mcp_command",
        "Serve the knowledge base and the loops to MCP clients (stdio or streamable HTTP).",
    ),
    "search": (
        "ragloop.cli.search:search",
        'Search the knowledge base for QUERY ("-" reads it from standard input).',
    ),
    "serve": (
        "ragloop.cli.serve:serve",
        "Serve the HTTP API, its web page and MCP (needs ragloop[server]).",
    ),
    "retrieval-loop": (
        "ragloop.cli.retrieval_loop:retrieval_loop",
        "Gather evidence for QUERY with the retrieval loop (offline, no LLM).",
    ),
    "traces": ("ragloop.cli.traces:traces_group", "Look at the runs `ragloop ask` stored."),
}
# old names that still run their command, not listed by --help
HIDDEN_ALIASES = {"agent-loop": "retrieval-loop"}


class LazyGroup(click.Group):
    """A group whose commands are imported when used (see the module docstring)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd_name = HIDDEN_ALIASES.get(cmd_name, cmd_name)
        if cmd_name not in COMMANDS:
            return None
        module, attribute = COMMANDS[cmd_name][0].split(":")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as error:
            # an error message may quote stored data or a path: shown, never obeyed
            from ragloop.cli.tables import printable

            error.message = printable(error.message)  # type: ignore[misc]  # Final in the stubs only
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        # shortened as click shortens a command's help, from the summary alone
        rows = [
            (name, click.Command(name, help=summary).get_short_help_str(limit))
            for name, (_, summary) in COMMANDS.items()
        ]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))


F = TypeVar("F", bound=Callable[..., Any])


def _use_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:  # imported only when given: --help stays light
        from ragloop.config import use_config_file

        use_config_file(value)


def config_option(function: F) -> F:
    """``--config FILE``: on ``ragloop`` itself and on the commands that serve."""
    return click.option(
        "--config",
        type=click.Path(dir_okay=False),
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_use_config,
        help="The config file (default: $RAGLOOP_CONFIG, else ./ragloop.toml if present).",
    )(function)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ragloop", prog_name="ragloop")
@config_option
def main() -> None:
    """ragloop: retrieval loops that notice a miss, try again, and show why."""


def run() -> None:
    """The ``ragloop`` program (and ``python -m ragloop``): :func:`main`, then an exit that skips
    the interpreter's teardown of every imported module (numpy, onnxruntime, pydantic: about
    70 ms here, a seventh of a one-off `ragloop search`). Output is flushed and exit handlers
    (telemetry exporters) run first; the knowledge base was closed by the command."""
    try:
        main()
        code: object = 0
    except SystemExit as exit_:
        code = exit_.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, status 1, as Python does
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`... | head`)
            stream.flush()
    threading._shutdown()  # type: ignore[attr-defined]  # worker threads finish, as at exit
    atexit._run_exitfuncs()
    os._exit(code)
