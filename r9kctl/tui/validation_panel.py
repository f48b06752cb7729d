"""The validation panel: the errors and warnings of the current state, each with its location and the
items it affects (errors first). It has a fixed size and is redrawn without a reflow of the screen (a
list widget whose length changes would re-layout every widget on each toggle); ``v`` opens the full
list (:class:`.dialogs.ProblemsScreen`), where choosing a problem moves the table to the first affected variant."""
from __future__ import annotations

from rich.text import Text
from textual import events
from textual.containers import Vertical
from textual.widgets import Static

from .session import Session

ICON = {"error": ("✗", "bold red"), "warning": ("!", "bold yellow"), "info": ("i", "cyan")}


def diagnostic_text(d, variants) -> Text:
    icon, style = ICON.get(d.level, ("?", ""))
    t = Text()
    t.append(f"{icon} ", style)
    t.append(f"{d.code}: ", style)
    t.append(d.message)
    items = [i for i in d.items if i in variants]
    if items:
        t.append(f"  [{', '.join(items)}]", "cyan")
    loc = d.location()
    if loc:
        t.append(f"  {loc}", "dim")
    return t


class ValidationPanel(Vertical):
    """A count line, then the problems, as many as fit."""

    _key: tuple = ()

    def compose(self):
        self.title_widget = Static(id="validation-title")
        self.body_widget = Static(id="validation-body")
        yield self.title_widget
        yield self.body_widget

    def show(self, s: Session) -> None:
        if not s.validated:
            self._key = ()
            self.title_widget.update(Text("… validating (registry, gate ledger, profile)", "dim"), layout=False)
            self.body_widget.update("", layout=False)
            return
        diags = s.diagnostics()
        key = (s.profile, s.tp, tuple(d.format() + repr(d.items) for d in diags))
        if key == self._key:
            return
        self._key = key
        ne = sum(1 for d in diags if d.level == "error")
        nw = sum(1 for d in diags if d.level == "warning")
        if not diags:
            title = Text.assemble(("✓ valid", "bold green"), " (no errors, no warnings)")
        else:
            title = Text.assemble((f"✗ {ne} error(s)" if ne else "✓ no errors", "bold red" if ne else "bold green"),
                                  "  ", (f"{nw} warning(s)", "yellow" if nw else "dim"), ("   v: all problems", "dim"))
        self.title_widget.update(title, layout=False)
        body = Text()
        for n, d in enumerate(diags):
            if n:
                body.append("\n")
            body.append_text(diagnostic_text(d, s.reg.variants))
        self.body_widget.update(body, layout=False)  # fixed height (app.tcss): cropped, not reflowed
        self.set_class(bool(ne), "-errors")

    def on_click(self, event: events.Click) -> None:
        self.screen.run_action("problems")
