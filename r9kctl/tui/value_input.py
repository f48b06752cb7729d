"""The input for an int, float, path or string knob (and any knob with ``e``): shows the allowed values
and refuses an illegal one with the registry's reason, before anything changes."""
from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from ...registry.schema import Variant


class ValueInputScreen(ModalScreen[Optional[str]]):
    """Dismisses with the canonical value, or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="r9k.cancel")]

    def __init__(self, variant: Variant, current: Optional[str], **kw) -> None:
        super().__init__(**kw)
        self.variant = variant
        self.current = current

    def compose(self):
        v = self.variant
        with Vertical(id="dialog"):
            yield Static(Text.assemble(("Set ", "bold"), (v.knob, "bold cyan"), f"  ({v.id})"), id="dialog-title")
            yield Static(Text.assemble("allowed: ", (v.allowed_text(), "bold"),
                                       f"   stock: {v.stock if v.stock is not None else '-'}"), id="value-allowed")
            yield Input(value=self.current or "", id="value-input", select_on_focus=True)
            yield Static("", id="value-error")

    def on_input_changed(self, event: Input.Changed) -> None:
        self.query_one("#value-error", Static).update(self._check(event.value)[1])

    def _check(self, raw: str) -> tuple[Optional[str], Text]:
        try:
            return self.variant.normalize(raw), Text("")
        except ValueError as exc:
            return None, Text(str(exc), "bold red")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        value, err = self._check(event.value)
        if value is None:
            self.query_one("#value-error", Static).update(err)
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)
