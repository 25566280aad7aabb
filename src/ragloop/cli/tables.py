"""Tables that never cut what a user needs.

In a terminal a listing is a rich table whose text columns fold (a long file name wraps, it is
never shortened with an ellipsis) and whose number columns keep their full width; when the
numbers alone would not fit the terminal's width, each row is printed as a block of
``header: value`` lines instead. Piped or redirected (not a terminal), a listing is plain text,
tab-separated, one line per row, for scripts to read. Long free text (a question, a query) is
shortened only where it is listed, never in what it came from (:func:`shorten`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

# room a text column needs before folding makes it unreadable
_MIN_TEXT_WIDTH = 12
# what a terminal obeys instead of showing: C0 controls but tab and newline (ESC, BEL, CR ...),
# DEL, the C1 controls (CSI, OSC, ... in one character) and the bidirectional overrides
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class Column:
    """A column: its ``header``, and whether it holds numbers (right-aligned, never folded)."""

    header: str
    numeric: bool = False


def printable(text: object) -> str:
    """``text`` safe to print to a terminal: each control character shown as its escape
    (``ESC`` as ``\\x1b``), so stored data (a file name, a chunk, a question, an answer) can
    never clear the screen, set the window title or move the cursor. Every command prints
    stored data through it (or :func:`cell`, :func:`shorten`, :func:`print_table`)."""
    return CONTROLS.sub(_visible, str(text))


def _visible(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to about ``limit`` characters with a note of its full length
    (for listings of questions and queries, which may be very long); :func:`printable`."""
    flat = " ".join(printable(text).split())
    if len(flat) <= limit:
        return flat
    return f"{flat[: limit - 1].rstrip()}… ({len(flat):,} characters)"


def cell(text: object) -> str:
    """Text shown as it is, however many brackets it has (rich markup escaped), and no
    control character (:func:`printable`): how stored data goes into rich markup."""
    return escape(printable(text))


def print_table(
    console: Console,
    columns: Sequence[Column | str],
    rows: Iterable[Sequence[str]],
    *,
    title: str | None = None,
    show_header: bool = True,
) -> None:
    """Print a listing (see the module docstring). Cells may hold rich markup; escape what
    comes from the user with :func:`cell`."""
    specs = [c if isinstance(c, Column) else Column(c) for c in columns]
    # markup is kept; a control character that slipped past cell() is shown, never obeyed
    table_rows = [[printable(c) for c in row] for row in rows]
    title = printable(title) if title is not None else None
    if not console.is_terminal:
        _print_plain(console, specs, table_rows, title, show_header)
        return
    numbers = [
        max([len(s.header), *(Text.from_markup(r[i]).cell_len for r in table_rows)]) + 3
        for i, s in enumerate(specs)
        if s.numeric
    ]
    texts = sum(1 for s in specs if not s.numeric)
    if sum(numbers) + texts * (_MIN_TEXT_WIDTH + 3) + 1 > console.width:
        _print_blocks(console, specs, table_rows, title)
        return
    table = Table(title=title, title_justify="left", show_header=show_header)
    for spec in specs:
        if spec.numeric:
            table.add_column(spec.header, justify="right", no_wrap=True)
        else:
            table.add_column(spec.header, overflow="fold")
    for row in table_rows:
        table.add_row(*row)
    console.print(table)


def _plain(markup: str) -> str:
    return " ".join(Text.from_markup(markup).plain.split())


def _print_plain(
    console: Console,
    specs: Sequence[Column],
    rows: list[list[str]],
    title: str | None,
    show_header: bool,
) -> None:
    lines = [title] if title else []
    if show_header:
        lines.append("\t".join(s.header for s in specs))
    lines += ["\t".join(_plain(c) for c in row) for row in rows]
    console.file.write("".join(f"{line}\n" for line in lines))
    console.file.flush()


def _print_blocks(
    console: Console, specs: Sequence[Column], rows: list[list[str]], title: str | None
) -> None:
    if title:
        console.print(Text(title, style="italic"))
    for row in rows:
        first, *rest = row
        console.print(Text.from_markup(first, style="bold"), overflow="fold")
        fields = Text("  ")
        for spec, value in zip(specs[1:], rest, strict=True):
            fields.append(f"{spec.header} ", style="dim")
            fields.append_text(Text.from_markup(value))
            fields.append("   ")
        console.print(fields, overflow="fold")
