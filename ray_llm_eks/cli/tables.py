"""Tables that cut no figure at any terminal width, shared by every command that prints one."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text


TABLE_CELL_PADDING = 2
"""rich's default: one space either side of a cell's text."""


def _column_needs(columns: list[tuple[str, bool]], rows: list[list[str]],
                  show_header: bool) -> tuple[list[int], list[int]]:
    """Per column, the narrowest width that cuts nothing (a numeric column: its widest figure; text:
    its longest word) and the width that wraps nothing."""
    texts = [[Text.from_markup(cell) for cell in row] for row in rows]
    headers = [Text.from_markup(name) for name, _ in columns]

    def longest_word(text: Text) -> int:
        return max((cell_len(word) for word in text.plain.split()), default=0)

    def whole(text: Text) -> int:
        return max((cell_len(line) for line in text.plain.splitlines()), default=0)

    need_min, need_max = [], []
    for index, (_, numeric) in enumerate(columns):
        cells = [row[index] for row in texts]
        header = [headers[index]] if show_header else []
        need_max.append(max(whole(text) for text in [*cells, *header]))
        need_min.append(max([whole(text) if numeric else longest_word(text) for text in cells]
                            + [longest_word(text) for text in header]))
    return need_min, need_max


def print_table(console: Console, title: str | None, columns: list[tuple[str, bool]], rows: list[list[str]],
                *, show_header: bool = True, show_lines: bool = False) -> None:
    """A table that never cuts a figure: ``columns`` are (header, numeric). Numbers keep one line
    each (right-aligned, never wrapped); text wraps between words, never inside one. When even that
    is wider than the terminal, a table of figures is printed turned (a column per row), and any
    other (or one whose turned form is still too wide) as a list of "header: value" lines per row.

    rich alone would shrink every column evenly once wrapping text is not enough, and cut what no
    longer fits with an ellipsis (``32,7…``), numbers included; so the widths are chosen here and
    handed to rich fixed. Cells are rich markup."""
    need_min, need_max = _column_needs(columns, rows, show_header)
    available = console.width - (len(columns) + 1) - TABLE_CELL_PADDING * len(columns)
    if sum(need_min) > available:
        turned_columns = [("", False), *((row[0], True) for row in rows)]
        turned_rows = [[name, *(row[i] for row in rows)] for i, (name, _) in enumerate(columns) if i]
        turned_available = console.width - (len(turned_columns) + 1) - TABLE_CELL_PADDING * len(turned_columns)
        if (show_header and all(numeric for _, numeric in columns[1:])
                and sum(_column_needs(turned_columns, turned_rows, True)[0]) <= turned_available):
            # A table of figures (one column per figure) reads better turned: one column per row.
            print_table(console, title, turned_columns, turned_rows)
            return
        _print_as_list(console, title, [name for name, _ in columns], rows, show_header=show_header)
        return
    widths = list(need_max)
    if sum(need_max) > available:
        # Columns share what is left above their minimum (longest word, whole figure) in proportion to
        # what they could use; a numeric column can only use it for its header.
        widths = list(need_min)
        spare = available - sum(need_min)
        wants = [high - low for high, low in zip(need_max, need_min)]
        total = sum(wants)
        for i, want in enumerate(wants):
            if total:
                widths[i] += min(want, want * spare // total)
    table = Table(title=title, title_justify="left", show_header=show_header, show_lines=show_lines)
    for (name, numeric), width in zip(columns, widths):
        # A numeric column is at least as wide as its widest figure, so no figure wraps; its header may.
        table.add_column(name, justify="right" if numeric else "left", width=width, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _print_as_list(console: Console, title: str | None, names: list[str], rows: list[list[str]], *,
                   show_header: bool) -> None:
    """Each row as its first cell, then one "header: value" line per other cell (a narrow terminal)."""
    if title:
        console.print(title)
    # A bare number says nothing on a line of its own ("1"): name it ("concurrency 1").
    named = show_header and names[0] and all(row[0].replace(",", "").replace(".", "").isdigit() for row in rows)
    for row in rows:
        console.print(f"[bold]{names[0] + ' ' if named else ''}{row[0]}[/]" if row[0] else "-")
        for name, cell in zip(names[1:], row[1:]):
            if cell:
                label = f"{name}: " if show_header else ""
                console.print(f"  {label}{cell}")


def print_rows(console: Any, rows: list[tuple[str, str]]) -> None:
    """A two-column table of (name, value), the values escaped for rich."""
    print_table(console, None, [("", False), ("", False)], [[escape(name), escape(value)] for name, value in rows],
                show_header=False)
