"""Every error and warning of the current state in a list; choosing one jumps to its first variant."""
from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from .session import Session
from .validation_panel import diagnostic_text


class ProblemsScreen(ModalScreen[Optional[str]]):
    """Dismisses with the variant id to jump to, or None."""

    BINDINGS = [Binding("escape,v,q", "close", "Close", id="r9k.close_problems")]

    def __init__(self, session: Session, **kw) -> None:
        super().__init__(**kw)
        self.s = session

    def compose(self):
        diags = self.s.diagnostics()
        with Vertical(id="problems-dialog"):
            yield Static(Text(f"{self.s.profile} at tp{self.s.tp}: {len(diags)} problem(s); enter jumps to the "
                              "first variant named", "bold"))
            opts = []
            for n, d in enumerate(diags):
                first = next((i for i in d.items if i in self.s.reg.variants), "")
                opts.append(Option(diagnostic_text(d, self.s.reg.variants), id=f"{n}:{first}"))
            yield OptionList(*opts, id="problems-list")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        vid = (event.option_id or "").split(":", 1)[-1]
        self.dismiss(vid or None)

    def action_close(self) -> None:
        self.dismiss(None)
