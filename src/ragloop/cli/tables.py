"""Tables that never cut what a user needs.

In a terminal a listing is a rich table whose text columns fold (a long file name wraps, it is
never shortened with an ellipsis) and whose number columns keep their full width; when the
numbers alone would not fit the terminal's width, each row is printed as a block of
``header: value`` lines instead. Piped or redirected (not a terminal), a listing is plain text,
tab-separated, one line per row, for scripts to read. Long free text (a question, a query) is
shortened only where it is listed, never in what it came from (:func:`shorten`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

# room a text column needs before folding makes it unreadable
_MIN_TEXT_WIDTH = 12


@dataclass(frozen=True)
class Column:
    """A column: its ``header``, and whether it holds numbers (right-aligned, never folded)."""

    header: str
    numeric: bool = False


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to about ``limit`` characters with a note of its full length
    (for listings of questions and queries, which may be very long)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return f"{flat[: limit - 1].rstrip()}… ({len(flat):,} characters)"


def cell(text: object) -> str:
    """Text shown as it is, however many brackets it has (rich markup escaped)."""
    return escape(str(text))


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
    table_rows = [list(row) for row in rows]
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
