"""A small modal question with a few answers, each with a key (escape cancels)."""
from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[str]):
    """``choices``: (answer id, label, key, variant). Dismisses with the answer id ("cancel" on escape)."""

    BINDINGS = [Binding("escape", "answer('cancel')", "Cancel", id="r9k.cancel")]

    def __init__(self, title: str, body, choices: list[tuple[str, str, str, str]], **kw) -> None:
        super().__init__(**kw)
        self.title_text = title
        self.body = body
        self.choices = choices
        self._keys = {key: cid for cid, _l, key, _v in choices if key}

    def compose(self):
        with Vertical(id="dialog"):
            yield Static(Text(self.title_text, "bold"), id="dialog-title")
            yield Static(self.body, id="dialog-body")
            with Horizontal(id="dialog-buttons"):
                for cid, label, key, variant in self.choices:
                    yield Button(f"{label} [{key}]" if key else label, id=f"answer-{cid}", variant=variant)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id.removeprefix("answer-"))

    def on_key(self, event) -> None:
        cid = self._keys.get(event.key)
        if cid is not None:
            event.stop()
            self.dismiss(cid)

    def action_answer(self, cid: str) -> None:
        self.dismiss(cid)
