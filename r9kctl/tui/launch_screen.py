"""Launch: the dry run (the exact command and environment ``r9kctl launch`` would use), then a confirm.

The ``vllm serve`` command comes first, the environment (about ninety ``export`` lines) is folded under
it (expandable), and a field takes extra vLLM arguments (``--port 8001``), the same ones
``r9kctl launch --profile P -- ARGS`` passes. An invalid profile is refused here with its errors; nothing
starts. Cancel is focused: enter never launches by accident."""
from __future__ import annotations

import shlex

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Collapsible, Input, Static


def command_text(plan) -> str:
    """The command line alone, as a person would type it."""
    return " ".join(shlex.quote(a) for a in plan.argv)


def env_text(plan) -> str:
    lines = [f"# {n}" for n in plan.notes]
    from r9k.registry.redact import export_line

    lines += [export_line(k, plan.env[k]) for k in sorted(plan.env)]  # quoted; a credential masked
    return "\n".join(lines)


class LaunchScreen(ModalScreen[bool]):
    """Dismisses with True to launch (only offered when the plan is valid); the extra arguments typed
    are kept in ``session.extra_args`` (the launch after the app exits uses them)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="r9k.cancel")]
    AUTO_FOCUS = "#launch-cancel"

    def __init__(self, session, unsaved: int, **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.unsaved = unsaved
        self.plan = session.plan_launch(final=False)

    def compose(self):
        p = self.plan
        with Vertical(id="launch-dialog"):
            yield Static(self._title(), id="dialog-title")
            with VerticalScroll(id="launch-body"):
                yield Static(self._command(), id="launch-command")
                if p.ok:
                    with Collapsible(title=f"environment: {len(p.env)} variable(s)", collapsed=True,
                                     id="launch-env"):
                        yield Static(self._env(), id="launch-env-text")
            yield Input(value=shlex.join(self.session.extra_args), id="launch-extra", compact=True,
                        placeholder="extra vllm serve arguments, e.g. --port 8001 (enter applies)")
            with Horizontal(id="dialog-buttons"):
                yield Button(Text("Cancel [esc]"), id="launch-cancel")
                if p.ok:
                    yield Button(Text("Launch [y]"), id="launch-go", variant="warning")

    def _title(self) -> Text:
        p = self.plan
        if p.ok:
            return Text.assemble(("Launch ", "bold"), (str(p.manifest.get("profile")), "bold cyan"),
                                 f" at tp{p.manifest.get('tp')}: dry run")
        return Text.assemble(("Refusing to launch ", "bold red"), (str(p.manifest.get("profile")), "bold"),
                             ": the profile does not validate")

    def _command(self):
        p = self.plan
        if not p.ok:
            return Group(*[Text(f"✗ {d.format()}", "red") for d in p.report.errors])
        head = Text()
        if self.unsaved:
            head.append(f"includes {self.unsaved} unsaved edit(s)\n", "bold magenta")
        head.append(f"profile {p.manifest.get('profile')} tp{p.manifest.get('tp')} hash {p.manifest.get('hash')}",
                    "dim")
        warn = [Text(f"! {d.format()}", "yellow") for d in p.report.warnings]
        return Group(head, *warn, Syntax(command_text(p), "bash", word_wrap=True, background_color="default"))

    def _env(self):
        return Syntax(env_text(self.plan), "bash", word_wrap=True, background_color="default")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            args = shlex.split(event.value)
        except ValueError as exc:
            self.notify(f"extra arguments: {exc}", severity="error")
            return
        self.session.extra_args = args
        self.plan = self.session.plan_launch(final=False)
        self.query_one("#launch-command", Static).update(self._command())
        if self.query("#launch-env-text"):
            self.query_one("#launch-env-text", Static).update(self._env())
        self.query_one("#launch-cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        go = event.button.id == "launch-go"
        if go and not self._apply_extra():
            return
        self.dismiss(go)

    def _apply_extra(self) -> bool:
        """The field's arguments into the plan (typed but not yet applied with enter); False if the
        plan they give is refused."""
        value = self.query_one("#launch-extra", Input).value
        if value == shlex.join(self.session.extra_args):
            return self.plan.ok
        try:
            self.session.extra_args = shlex.split(value)
        except ValueError as exc:
            self.notify(f"extra arguments: {exc}", severity="error")
            return False
        self.plan = self.session.plan_launch(final=False)
        self.query_one("#launch-command", Static).update(self._command())
        return self.plan.ok

    def on_key(self, event) -> None:
        if event.key == "y" and self.plan.ok and not isinstance(self.focused, Input):
            event.stop()
            if self._apply_extra():
                self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
