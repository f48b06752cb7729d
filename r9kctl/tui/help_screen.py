"""The help screen: the keys (as currently mapped, with their binding ids for a keymap file) and what
the columns and colours mean."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

ABOUT = """\
Columns: the value here (● on, bold = not at stock), the stock value (vLLM's own path), where the value comes from (registry < release < profile < env < override; profile* = an unsaved edit), the variant's status, its gate state from the evidence ledger (fresh, stale, missing, failed; - no runnable gate) and its KV-cache cost in tokens at this TP size (in brackets: what it would cost if switched on).

Marks: ✗ named by an error, ! by a warning, * changed and not saved.

Every change is re-resolved and re-validated at once; save keeps the file's comments and layout, writes atomically, and refuses a file that changed on disk since it was loaded (reload or save as instead).

Keys can be remapped by binding id in $XDG_CONFIG_HOME/r9k/tui.toml ([keys] r9k.save = "ctrl+w") or with r9kctl tui --keymap FILE."""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close", id="r9k.close_help")]

    def __init__(self, bindings: list[tuple[str, str, str]], **kw) -> None:
        super().__init__(**kw)
        self.bindings = bindings  # (keys, description, id)

    def compose(self):
        t = Table(title="r9kctl tui: keys", title_justify="left", header_style="bold", expand=True, box=None)
        t.add_column("key", style="bold cyan", no_wrap=True)
        t.add_column("action")
        t.add_column("binding id", style="dim", no_wrap=True)
        for keys, desc, bid in self.bindings:
            t.add_row(keys, desc, bid)
        t.add_row("ctrl+p", "command palette: switch profile, jump to variant, diff, save, launch", "")
        with VerticalScroll(id="help-dialog"):
            yield Static(Group(t, Text(""), Text(ABOUT)))

    def action_dismiss(self) -> None:
        self.dismiss(None)
