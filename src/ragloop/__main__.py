"""``python -m ragloop`` is ``ragloop``."""

from ragloop.cli import run

run()
