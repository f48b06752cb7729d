"""A small modal question with a few answers, each with a key (escape cancels).

The focused button (what enter presses) is never a destructive one: ``default`` names it, and without
it the first answer whose button is not ``error``/``warning`` styled is focused."""
from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

DESTRUCTIVE = ("error", "warning")


class ConfirmScreen(ModalScreen[str]):
    """``choices``: (answer id, label, key, variant). Dismisses with the answer id ("cancel" on escape)."""

    BINDINGS = [Binding("escape", "answer('cancel')", "Cancel", id="r9k.cancel")]
    AUTO_FOCUS = None  # on_mount focuses the safe answer

    def __init__(self, title: str, body, choices: list[tuple[str, str, str, str]], default: Optional[str] = None,
                 **kw) -> None:
        super().__init__(**kw)
        self.title_text = title
        self.body = body
        self.choices = choices
        self._keys = {key: cid for cid, _l, key, _v in choices if key}
        safe = [cid for cid, _l, _k, variant in choices if variant not in DESTRUCTIVE]
        if default is None:
            default = safe[0] if safe else "cancel"
        if default not in safe:
            raise ValueError(f"the default answer {default!r} must not be a destructive one")
        self.default = default

    def compose(self):
        with Vertical(id="dialog"):
            yield Static(Text(self.title_text, "bold"), id="dialog-title")
            yield Static(self.body, id="dialog-body")
            with Horizontal(id="dialog-buttons"):
                for cid, label, key, variant in self.choices:
                    # a Text: "[s]" in a markup string would be read as a style (strike)
                    yield Button(Text(f"{label} [{key}]" if key else label), id=f"answer-{cid}", variant=variant)

    def on_mount(self) -> None:
        self.query_one(f"#answer-{self.default}", Button).focus()

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
