"""A one-line picker (profile, TP size, filters, diff sides): shows the choice; enter, space or a click
opens a small list with a filter box (type to narrow, enter to choose, escape to keep the choice). One
widget instead of Textual's ``Select`` (four, its overlay list built up front): a faster first frame."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from .session import match_rank

Options = Sequence[tuple[str, Any]]  # (label, value)


class PickerScreen(ModalScreen[Optional[int]]):
    """Dismisses with the index of the chosen option, or None."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel", id="r9k.cancel"),
                Binding("down", "move(1)", show=False), Binding("up", "move(-1)", show=False)]

    def __init__(self, title: str, options: Options, current: int, **kw) -> None:
        super().__init__(**kw)
        self.title_text = title
        self.options = list(options)
        self.current = current

    def compose(self):
        with Vertical(id="picker-dialog"):
            yield Static(Text(self.title_text, "bold"))
            yield Input(placeholder="type to filter", id="picker-filter")
            yield OptionList(id="picker-list")

    def on_mount(self) -> None:
        self._fill("")
        self.query_one(Input).focus()

    def _fill(self, query: str) -> None:
        words = query.lower().split()
        lst = self.query_one(OptionList)
        lst.clear_options()
        matches = [(match_rank(label, words), i, label) for i, (label, _v) in enumerate(self.options)
                   if all(w in label.lower() for w in words)]
        # the best match first (what enter takes): exact, then prefix, then a word's prefix, then anywhere
        shown = [Option(label, id=str(i)) for _r, i, label in sorted(matches)]
        lst.add_options(shown)
        if shown:
            ids = [o.id for o in shown]
            lst.highlighted = ids.index(str(self.current)) if not words and str(self.current) in ids else 0

    def on_input_changed(self, event: Input.Changed) -> None:
        self._fill(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        lst = self.query_one(OptionList)
        if lst.highlighted is not None and lst.option_count:
            self.dismiss(int(lst.get_option_at_index(lst.highlighted).id))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(int(event.option_id))

    def action_move(self, step: int) -> None:
        lst = self.query_one(OptionList)
        if lst.option_count:
            lst.highlighted = ((lst.highlighted or 0) + step) % lst.option_count


class Picker(Widget, can_focus=True):
    """``Picker(label, options, value)``; posts :class:`Picker.Changed` when the user picks a value."""

    DEFAULT_CSS = """
    Picker { height: 1; width: auto; padding: 0 1; background: $boost; }
    Picker:focus { background: $block-cursor-background; color: $block-cursor-foreground; }
    """
    BINDINGS = [Binding("enter,space", "open", "Choose", show=False)]

    class Changed(Message):
        def __init__(self, picker: "Picker", value: Any) -> None:
            super().__init__()
            self.picker = picker
            self.value = value

        @property
        def control(self) -> "Picker":
            return self.picker

    def __init__(self, label: str, options: Options, value: Any = None, **kw) -> None:
        super().__init__(**kw)
        self.label = label
        self._options = list(options)
        self._value = value

    @property
    def value(self) -> Any:
        return self._value

    @value.setter
    def value(self, value: Any) -> None:
        """Set without posting Changed (the program, not the user, chose)."""
        self._value = value
        self.refresh(layout=True)

    def set_options(self, options: Options, value: Any = None) -> None:
        self._options = list(options)
        self._value = value
        self.refresh(layout=True)

    def _shown(self) -> str:
        for label, v in self._options:
            if v == self._value:
                return label
        return "all" if self._value is None else str(self._value)

    def render(self) -> Text:
        return Text.assemble((f"{self.label} ", "dim"), self._shown(), " ▾")

    def get_content_width(self, container, viewport) -> int:
        return len(self.label) + 1 + len(self._shown()) + 2

    def on_click(self, event: events.Click) -> None:
        self.action_open()

    def action_open(self) -> None:
        values = [v for _l, v in self._options]
        cur = values.index(self._value) if self._value in values else 0

        def done(idx: Optional[int]) -> None:
            if idx is None:
                return
            self._value = self._options[idx][1]
            self.refresh(layout=True)
            self.post_message(self.Changed(self, self._value))

        self.app.push_screen(PickerScreen(f"Choose {self.label}", self._options, cur), done)
