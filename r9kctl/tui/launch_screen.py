"""Launch: the dry run (the exact command and environment ``r9kctl launch`` would use), then a confirm.
An invalid profile is refused here with its errors; nothing starts."""
from __future__ import annotations

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class LaunchScreen(ModalScreen[bool]):
    """Dismisses with True to launch (only offered when the plan is valid)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="r9k.cancel")]

    def __init__(self, plan, unsaved: int, **kw) -> None:
        super().__init__(**kw)
        self.plan = plan
        self.unsaved = unsaved

    def compose(self):
        p = self.plan
        with Vertical(id="launch-dialog"):
            if p.ok:
                title = Text.assemble(("Launch ", "bold"), (str(p.manifest.get("profile")), "bold cyan"),
                                      f" at tp{p.manifest.get('tp')}: dry run")
            else:
                title = Text.assemble(("Refusing to launch ", "bold red"), (str(p.manifest.get("profile")), "bold"),
                                      ": the profile does not validate")
            yield Static(title, id="dialog-title")
            with VerticalScroll(id="launch-body"):
                if p.ok:
                    note = Text("")
                    if self.unsaved:
                        note = Text(f"includes {self.unsaved} unsaved edit(s)\n", "bold magenta")
                    warn = [Text(f"! {d.format()}", "yellow") for d in p.report.warnings]
                    yield Static(Group(note, *warn, Syntax(p.display(), "bash", word_wrap=True,
                                                           background_color="default")))
                else:
                    yield Static(Group(*[Text(f"✗ {d.format()}", "red") for d in p.report.errors]))
            with Horizontal(id="dialog-buttons"):
                if p.ok:
                    yield Button("Launch [y]", id="launch-go", variant="warning")
                yield Button("Cancel [esc]", id="launch-cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "launch-go")

    def on_key(self, event) -> None:
        if event.key == "y" and self.plan.ok:
            event.stop()
            self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
