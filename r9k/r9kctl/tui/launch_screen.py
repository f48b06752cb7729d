"""Launch: the exact command of ``r9kctl launch --dry-run``, its environment and the validation's warnings folded
under it, and a field for extra vLLM arguments (enter applies them). ``ctrl+l`` (``y`` outside the field, or the
button) launches in the background and opens the server screen. An invalid profile is refused with its errors."""
from __future__ import annotations

import shlex

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Collapsible, Input, Static


class LaunchScreen(ModalScreen[bool]):
    """Dismisses with True to launch (a valid plan only); the extra arguments go to ``session.extra_args``."""

    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel", id="r9k.cancel"),
                Binding("ctrl+l", "launch", "Launch", id="r9k.launch_go", priority=True)]
    AUTO_FOCUS = "#launch-extra"

    def __init__(self, session, unsaved: int, **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.unsaved = unsaved
        self.plan = self._plan()

    def _plan(self):
        """The plan a launch runs (the manifest written); its env file beside the manifest, as the dry run's."""
        plan = self.session.plan_launch(final=True)
        if plan.ok:
            plan.write_env_file()
        return plan

    def compose(self):
        p = self.plan
        with Vertical(id="launch-dialog"):
            yield Static(self._title(), id="dialog-title")
            yield Input(value=shlex.join(self.session.extra_args), id="launch-extra", compact=True,
                        placeholder="extra vllm serve arguments, e.g. --port 8001 (enter applies)")
            with VerticalScroll(id="launch-body"):
                yield Static(self._command(), id="launch-command")
                if p.ok:
                    with Collapsible(title=self._env_title(), collapsed=True, id="launch-env"):
                        yield Static(self._env(), id="launch-env-text")
                    w = p.report.warnings
                    with Collapsible(title=f"{len(w)} warning(s) of the validation", collapsed=True,
                                     id="launch-warnings"):
                        yield Static(Group(*[Text(f"! {d.format()}", "yellow") for d in w]) if w else Text("none"),
                                     id="launch-warnings-text")
            with Horizontal(id="dialog-buttons"):
                yield Button(Text("Cancel [esc]"), id="launch-cancel")
                if p.ok:
                    yield Button(Text("Launch [ctrl+l]"), id="launch-go", variant="warning")

    def on_mount(self) -> None:
        for b in self.query(Button):
            b.can_focus = False  # enter presses no button

    def _title(self) -> Text:
        p = self.plan
        if p.ok:
            return Text.assemble(("Launch ", "bold"), (str(p.manifest.get("profile")), "bold cyan"),
                                 f" at tp{p.manifest.get('tp')}: the exact command (r9kctl launch --dry-run)")
        return Text.assemble(("Refusing to launch ", "bold red"), (str(p.manifest.get("profile")), "bold"),
                             ": the profile does not validate")

    def dry_run_lines(self) -> list[str]:
        """``r9kctl launch --dry-run``'s text of this plan, line by line (the command last)."""
        return self.plan.display().splitlines()

    def _command(self):
        p = self.plan
        if not p.ok:
            return Group(*[Text(f"✗ {d.format()}", "red") for d in p.report.errors])
        head = Text()
        if self.unsaved:
            head.append(f"includes {self.unsaved} unsaved edit(s)\n", "bold magenta")
        return Group(head, Syntax(self.dry_run_lines()[-1], "bash", word_wrap=True, background_color="default"))

    def _env_title(self) -> str:
        return f"environment: {len(self.plan.env)} variable(s), and the plan's notes"

    def _env(self):
        return Syntax("\n".join(self.dry_run_lines()[:-1]), "bash", word_wrap=True, background_color="default")

    def _refresh_plan(self) -> None:
        self.plan = self._plan()
        self.query_one("#launch-command", Static).update(self._command())
        if self.query("#launch-env-text"):
            self.query_one("#launch-env", Collapsible).title = self._env_title()
            self.query_one("#launch-env-text", Static).update(self._env())

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()  # enter applies the arguments; the focus stays in the field
        self._apply_extra()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "launch-go":
            self.action_launch()
        else:
            self.dismiss(False)

    def _apply_extra(self) -> bool:
        """The field's arguments into the plan; False if they cannot be split or the plan is refused."""
        value = self.query_one("#launch-extra", Input).value
        if value == shlex.join(self.session.extra_args):
            return self.plan.ok
        try:
            self.session.extra_args = shlex.split(value)
        except ValueError as exc:
            self.notify(f"extra arguments: {exc}", severity="error")
            return False
        self._refresh_plan()
        return self.plan.ok

    def action_launch(self) -> None:
        if self.plan.ok and self._apply_extra():
            self.dismiss(True)

    def on_key(self, event) -> None:
        if event.key == "y" and self.plan.ok and not isinstance(self.focused, Input):
            event.stop()
            self.action_launch()
