"""Opening on a broken registry or profile: the located diagnostics (file:line:col), not a traceback."""
from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static


class ErrorScreen(Screen):
    BINDINGS = [
        Binding("r", "app.retry_load", "Retry", id="r9k.retry"),
        Binding("e", "app.edit_broken_file", "Open in $EDITOR", id="r9k.edit_broken"),
        Binding("q,escape", "app.quit", "Quit", id="r9k.quit_error"),
    ]

    def __init__(self, diagnostics, **kw) -> None:
        super().__init__(**kw)
        self.diagnostics = diagnostics

    def compose(self):
        n = sum(1 for d in self.diagnostics if d.level == "error")
        lines = [Text(f"The registry or a profile cannot be loaded ({n} error(s)). Fix the file(s), then press r (e opens the first in $EDITOR).\n",
                      "bold red")]
        for d in self.diagnostics:
            t = Text()
            t.append(d.location() or "(no file)", "bold")
            t.append(f"  {d.level}[{d.code}]: ", "red" if d.level == "error" else "yellow")
            t.append(d.message)
            if d.hint:
                t.append(f" ({d.hint})", "dim")
            lines.append(t)
        with VerticalScroll(id="error-body"):
            yield Static(Group(*lines), id="error-text")
        yield Footer()
