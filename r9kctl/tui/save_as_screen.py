"""Save as: the name of a new profile that extends the current one and holds the edits."""
from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from ...registry.profile_io import PROFILE_NAME_RE


class SaveAsScreen(ModalScreen[Optional[str]]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="r9k.cancel")]

    def __init__(self, base: str, folder: str, taken: set[str], **kw) -> None:
        super().__init__(**kw)
        self.base, self.folder, self.taken = base, folder, taken

    def compose(self):
        with Vertical(id="dialog"):
            yield Static(Text.assemble(("Save as a new profile", "bold")), id="dialog-title")
            yield Static(f"extends '{self.base}', holds the edits; written to {self.folder}/NAME.toml")
            yield Input(value=f"{self.base}-edit", id="save-as-name", select_on_focus=True)
            yield Static("", id="save-as-error")

    def _problem(self, name: str) -> str:
        if not PROFILE_NAME_RE.match(name):
            return "lower-case letters, digits, '.', '_' or '-'"
        if name in self.taken:
            return f"a profile named '{name}' exists"
        return ""

    def on_input_changed(self, event: Input.Changed) -> None:
        self.query_one("#save-as-error", Static).update(Text(self._problem(event.value.strip()), "bold red"))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        name = event.value.strip()
        if self._problem(name):
            return
        self.dismiss(name)

    def action_cancel(self) -> None:
        self.dismiss(None)
