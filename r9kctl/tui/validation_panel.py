"""The validation panel: the errors and warnings of the current state, each with its location and the
items it affects; choosing one moves the table to the first affected variant."""
from __future__ import annotations

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

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
    """Header line (counts) and one option per diagnostic (its id: the first affected variant)."""

    def compose(self):
        yield Static(id="validation-title")
        yield OptionList(id="validation-list")

    _key: tuple = ()

    def show(self, s: Session) -> None:
        diags = s.diagnostics()
        key = (s.profile, s.tp, tuple(d.format() + repr(d.items) for d in diags))
        if key == self._key:
            return  # the same problems: keep the list (and its highlight) as it is
        self._key = key
        ne = sum(1 for d in diags if d.level == "error")
        nw = sum(1 for d in diags if d.level == "warning")
        title = self.query_one("#validation-title", Static)
        if not diags:
            title.update(Text.assemble(("✓ valid", "bold green"), ": no errors, no warnings"), layout=False)
        else:
            title.update(Text.assemble((f"✗ {ne} error(s)" if ne else "✓ no errors", "bold red" if ne else "bold green"),
                                       "  ", (f"{nw} warning(s)", "yellow" if nw else "dim")), layout=False)
        self.set_class(bool(ne), "-errors")
        lst = self.query_one(OptionList)
        lst.clear_options()
        opts = []
        for n, d in enumerate(diags):
            first = next((i for i in d.items if i in s.reg.variants), None)
            opts.append(Option(diagnostic_text(d, s.reg.variants), id=f"{n}:{first or ''}"))
        lst.add_options(opts)
