"""The panel's small screens: a question with a few answers, a value or a new profile's name typed in a
field, every problem in a list, the keys, and the located errors of a registry that cannot be loaded."""
from __future__ import annotations

from typing import Optional

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from ...registry.profile_io import PROFILE_NAME_RE
from ...registry.schema import Variant
from .session import Session
from .panels import diagnostic_text

DESTRUCTIVE = ("error", "warning")


class ConfirmScreen(ModalScreen[str]):
    """``choices``: (answer id, label, key, variant). Dismisses with the answer id ("cancel" on escape). The focused
    button (``default``, else the first safe one) is never a destructive (``error``/``warning``) one."""

    BINDINGS = [Binding("escape", "dismiss('cancel')", "Cancel", id="r9k.cancel")]
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


class FieldScreen(ModalScreen[Optional[str]]):
    """A field checked as it is typed; enter dismisses with the checked value, escape with None. A subclass
    composes the field and its error line (``#{FIELD}-error``) and checks."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel", id="r9k.cancel")]
    FIELD = ""

    def check(self, raw: str) -> tuple[Optional[str], str]:
        """(the value, or None) and the error ('' when none)."""
        raise NotImplementedError

    def show_error(self, raw: str) -> Optional[str]:
        value, err = self.check(raw)
        self.query_one(f"#{self.FIELD}-error", Static).update(Text(err, "bold red"))
        return value

    def on_input_changed(self, event: Input.Changed) -> None:
        self.show_error(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        value = self.show_error(event.value)
        if value is not None:
            self.dismiss(value)


class ValueInputScreen(FieldScreen):
    """The input of a value (``=``, or space on a non-bool, non-enum knob): shows the allowed values and refuses
    an illegal one with the registry's reason. Dismisses with the canonical value, or None."""

    FIELD = "value"

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

    def check(self, raw: str) -> tuple[Optional[str], str]:
        try:
            return self.variant.normalize(raw), ""
        except ValueError as exc:
            return None, str(exc)


class SaveAsScreen(FieldScreen):
    """Save as: the name of a new profile that extends the current one and holds the edits."""

    FIELD = "save-as"

    def __init__(self, base: str, folder: str, taken: set[str], **kw) -> None:
        super().__init__(**kw)
        self.base, self.folder, self.taken = base, folder, taken

    def compose(self):
        with Vertical(id="dialog"):
            yield Static(Text("Save as a new profile", "bold"), id="dialog-title")
            yield Static(f"extends '{self.base}', holds the edits; written to {self.folder}/NAME.toml")
            yield Input(value=f"{self.base}-edit", id="save-as-name", select_on_focus=True)
            yield Static("", id="save-as-error")

    def check(self, raw: str) -> tuple[Optional[str], str]:
        name = raw.strip()
        if not PROFILE_NAME_RE.match(name):
            return None, "lower-case letters, digits, '.', '_' or '-'"
        if name in self.taken:
            return None, f"a profile named '{name}' exists"
        return name, ""


class ProblemsScreen(ModalScreen[Optional[str]]):
    """Every problem of the current state; choosing one dismisses with its first variant's id, escape with None."""

    BINDINGS = [Binding("escape,v,q", "dismiss", "Close", id="r9k.close_problems")]

    def __init__(self, session: Session, **kw) -> None:
        super().__init__(**kw)
        self.s = session

    def compose(self):
        diags = self.s.diagnostics()
        with Vertical(id="problems-dialog"):
            yield Static(Text(f"{self.s.profile} at tp{self.s.tp}: {len(diags)} problem(s); enter jumps to the "
                              "first variant named", "bold"))
            variants = self.s.reg.variants
            firsts = [next((i for i in d.items if i in variants), "") for d in diags]
            yield OptionList(*(Option(diagnostic_text(d, variants), id=f"{n}:{first}")
                               for n, (d, first) in enumerate(zip(diags, firsts))), id="problems-list")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        vid = (event.option_id or "").split(":", 1)[-1]
        self.dismiss(vid or None)


ABOUT = """\
Columns: the value here (● on, bold = not at stock), the stock value (vLLM's own path), where the value comes from (registry < release < profile < env < override; profile* = an unsaved edit), the variant's status, its gate state from the evidence ledger (fresh, stale, missing, failed; - no runnable gate) and its KV-cache cost in tokens at this TP size (in brackets: what it would cost if switched on).

Marks: ✗ named by an error, ! by a warning, * changed and not saved.

Every change is re-resolved and re-validated at once; save keeps the file's comments and layout, writes atomically, and refuses a file that changed on disk since it was loaded (reload or save as instead).

Keys can be remapped by binding id in $XDG_CONFIG_HOME/r9k/tui.toml ([keys] r9k.save = "ctrl+w") or with r9kctl tui --keymap FILE."""


class HelpScreen(ModalScreen[None]):
    """The keys as mapped (with their binding ids) and what the columns and colours mean."""

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


class ErrorScreen(Screen):
    """Opening on a broken registry or profile: the located diagnostics (file:line:col), not a traceback."""

    BINDINGS = [
        Binding("r", "app.retry_load", "Retry", id="r9k.retry"),
        Binding("e", "app.edit_broken_file", "Open in $EDITOR", id="r9k.edit_broken"),
        Binding("q,escape", "app.quit", "Quit", id="r9k.quit_error"),
    ]

    def __init__(self, diagnostics, **kw) -> None:
        super().__init__(**kw)
        self.diagnostics = diagnostics

    def compose(self):
        n = sum(1 for d in self.diagnostics if d.level == "error")
        lines = [Text(f"The registry or a profile cannot be loaded ({n} error(s)). Fix the file(s), then press r "
                      "(e opens the first in $EDITOR).\n", "bold red")]
        for d in self.diagnostics:
            t = Text.assemble((d.location() or "(no file)", "bold"),
                              (f"  {d.level}[{d.code}]: ", "red" if d.level == "error" else "yellow"), d.message)
            if d.hint:
                t.append(f" ({d.hint})", "dim")
            lines.append(t)
        with VerticalScroll(id="error-body"):
            yield Static(Group(*lines), id="error-text")
        yield Footer()
