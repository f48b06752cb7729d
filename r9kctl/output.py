"""Output for the command line: rich tables on a terminal, plain aligned text when piped.

rich is imported only when a table is drawn for a terminal, so scripted use (``--format json``, pipes)
stays fast.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Iterable, Optional, Sequence

from r9k.registry import envvars
from r9k.registry.errors import Diagnostic


_forced_plain = False


def force_plain() -> None:
    """Plain text for the rest of this process (``r9kctl --plain``)."""
    global _forced_plain
    _forced_plain = True


def is_tty() -> bool:
    if _forced_plain or envvars.PLAIN.on() or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def table(columns: Sequence[str], rows: Iterable[Sequence], title: Optional[str] = None, stream=None) -> None:
    rows = [[_cell(c) for c in r] for r in rows]
    stream = stream or sys.stdout
    if is_tty() and stream is sys.stdout:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title, title_justify="left", header_style="bold")
        for c in columns:
            t.add_column(c, overflow="fold")
        for r in rows:
            t.add_row(*r)
        Console().print(t)
        return
    if title:
        stream.write(f"{title}\n")
    widths = [len(c) for c in columns]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    # the last column is not padded (it may be long text)
    widths = [min(w, 60) for w in widths]
    indent = sum(w + 2 for w in widths[:-1])

    def fmt(r):
        head = "  ".join(c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)).rstrip()
        # continuation lines of a multi-line last cell line up under that cell
        return head.replace("\n", "\n" + " " * indent)

    stream.write(fmt(list(columns)) + "\n")
    for r in rows:
        stream.write(fmt(r) + "\n")


def heading(text: str) -> None:
    if is_tty():
        from rich.console import Console

        Console().print(f"[bold]{text}[/bold]")
    else:
        print(text)


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


def diagnostics(diags: Sequence[Diagnostic], stream=None) -> None:
    """One located line per diagnostic, errors first; to stderr by default."""
    stream = stream or sys.stderr
    order = {"error": 0, "warning": 1, "info": 2}
    for d in sorted(diags, key=lambda d: order.get(d.level, 3)):
        stream.write(d.format() + "\n")
