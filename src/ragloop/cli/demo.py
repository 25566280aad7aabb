"""The demo knowledge base for the commands that take --demo."""

from __future__ import annotations

import click

from ragloop.cli.common import errors
from ragloop.core.errors import RagloopError
from ragloop.demo import demo_kb_path, demo_knowledge_base
from ragloop.kb.knowledge_base import KnowledgeBase


def open_demo() -> KnowledgeBase:
    """The demo knowledge base, with a note while it is built the first time."""
    try:
        if not demo_kb_path().exists():
            with errors.status("building the demo knowledge base (first use only)…"):
                return demo_knowledge_base()
        return demo_knowledge_base()
    except RagloopError as error:
        raise click.ClickException(str(error)) from None
