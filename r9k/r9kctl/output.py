"""Output for the command line: rich tables on a terminal (rich imported only then), plain aligned text when piped.

Every command writes through :class:`SafeStream` (``cli.main`` puts it over stdout and stderr): control and
bidi characters from any data are shown escaped (:func:`r9k.registry.redact.escape`); table cells and
diagnostics are escaped before rich sees them. A helper that has printed what is wrong raises :class:`Exit`.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Iterable, Optional, Sequence

from ..registry import envvars
from ..registry.errors import Diagnostic
from ..registry.redact import escape, escape_output


class Exit(Exception):
    """Raised by a helper that has reported what is wrong (``common.load``): the command ends with ``code``."""

    def __init__(self, code: int = 2):
        super().__init__(code)
        self.code = code


class SafeStream:
    """A text stream that writes ``escape_output`` of what it is given to ``raw`` (see the module text)."""

    def __init__(self, raw):
        self.raw = raw
        try:
            self.colour = bool(raw.isatty())
        except (AttributeError, ValueError, OSError):
            self.colour = False

    def write(self, s: str) -> int:
        self.raw.write(escape_output(s, self.colour))
        return len(s)

    def __getattr__(self, name):
        return getattr(self.raw, name)


def guarded(fn, *args):
    """``fn(*args)`` with stdout and stderr behind :class:`SafeStream` (restored afterwards)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)
    try:
        return fn(*args)
    finally:
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except (OSError, ValueError):
                pass
        sys.stdout, sys.stderr = out, err


_PLAIN = False  # set by ``r9kctl --plain``


def set_plain(plain: bool) -> None:
    global _PLAIN
    _PLAIN = plain


def is_tty() -> bool:
    if _PLAIN or envvars.PLAIN.on() or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return escape(v, "\n")


KEY_COLUMNS = {"id", "knob", "variant", "name", "profile", "release", "field", "config"}  # never hidden
FREE_TEXT = {"summary", "description", "source", "note", "reason", "headline", "value", "detail", "message",
             "implementation in use", "what"}  # the only columns that fold
HIDE_FIRST = ("stock", "layer", "from", "area", "category", "status", "unit", "role", "rank", "pid",
              "previous", "changes", "extends", "model")  # hidden before the other columns (right to left)


def fit_columns(columns: Sequence[str], rows: list[list[str]], width: int,
                fold: Optional[Sequence[str]] = None) -> tuple[list[int], list[int]]:
    """(shown column indexes, folding column indexes) of a table drawn ``width`` cells wide with rich's
    default box: a key column (the first, or one named in KEY_COLUMNS) is never cut or hidden, a free-text
    column folds, any other column keeps its longest cell whole and is hidden, rightmost first, when the
    table would not fit otherwise."""
    n = len(columns)
    folding = {i for i, c in enumerate(columns) if c.lower() in (set(fold) if fold else FREE_TEXT)}
    if not folding:
        folding = {n - 1}
    keys = {0} | {i for i, c in enumerate(columns) if c.lower() in KEY_COLUMNS} - folding
    natural = [max([len(columns[i])] + [max((len(x) for x in r[i].split("\n")), default=0) for r in rows])
               for i in range(n)]
    shown = list(range(n))

    def need() -> int:
        return 1 + sum(3 + (max(len(columns[i]), min(natural[i], 20)) if i in folding else natural[i])
                       for i in shown)

    first = [i for i in reversed(range(n)) if columns[i].lower() in HIDE_FIRST]
    for i in first + [i for i in reversed(range(n)) if i not in first]:
        if need() <= width:
            break
        if i not in keys and i not in folding:
            shown.remove(i)
    return shown, sorted(folding & set(shown))


def table(columns: Sequence[str], rows: Iterable[Sequence], title: Optional[str] = None, stream=None,
          fold: Optional[Sequence[str]] = None) -> None:
    """A table: on a terminal rich's, where names are never broken (see :func:`fit_columns`; hidden
    columns are named under it), else plain aligned text. ``fold``: the free-text columns (default: the
    ones named in FREE_TEXT, else the last)."""
    rows = [[_cell(c) for c in r] for r in rows]
    stream = stream or sys.stdout
    if is_tty() and stream is sys.stdout:
        from rich.console import Console
        from rich.table import Table

        console = Console()
        shown, folding = fit_columns(columns, rows, console.width, fold)
        t = Table(title=title, title_justify="left", header_style="bold")
        for i in shown:
            t.add_column(columns[i], **({"overflow": "fold"} if i in folding else {"no_wrap": True,
                                                                                   "overflow": "ellipsis"}))
        for r in rows:
            t.add_row(*(r[i] for i in shown))
        console.print(t)
        hidden = [c for i, c in enumerate(columns) if i not in shown]
        if hidden:
            console.print(f"[dim]not shown at this width: {', '.join(hidden)} (a wider terminal, or "
                          f"--plain / --format json where the command has it)[/dim]")
        return
    if title:
        stream.write(f"{title}\n")
    widths = [min(max([len(c)] + [len(r[i]) for r in rows if i < len(r)]), 60) for i, c in enumerate(columns)]
    # the last column is not padded (it may be long text)
    indent = sum(w + 2 for w in widths[:-1])

    def fmt(r):
        head = "  ".join(c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)).rstrip()
        # continuation lines of a multi-line last cell line up under that cell
        return head.replace("\n", "\n" + " " * indent)

    stream.write("".join(fmt(r) + "\n" for r in [list(columns), *rows]))


def heading(text: str) -> None:
    if is_tty():
        from rich.console import Console

        Console().print(f"[bold]{text}[/bold]")
    else:
        print(text)


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


SHOWN_PER_FILE = 20  # the first problems of a file and level are shown, then "and K more" (json lists all)


def diagnostics(diags: Sequence[Diagnostic], stream=None) -> None:
    """One located line per diagnostic, errors first; to stderr by default. At most
    :data:`SHOWN_PER_FILE` of one file and level, then one line saying how many more there are."""
    stream = stream or sys.stderr
    order = {"error": 0, "warning": 1, "info": 2}
    counts: dict[tuple, int] = {}
    for d in sorted(diags, key=lambda d: order.get(d.level, 3)):
        key = (d.file, d.level)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] <= SHOWN_PER_FILE:
            stream.write(d.format() + "\n")
    for (file, level), n in counts.items():
        if n > SHOWN_PER_FILE:
            more = Diagnostic(level, "more", f"and {n - SHOWN_PER_FILE} more {level}(s) in this file, not shown "
                                             f"(--format json lists every one)", file)
            stream.write(more.format() + "\n")
