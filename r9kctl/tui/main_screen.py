"""The main screen: profile and TP pickers, filters, the variant table, the detail pane, the validation
panel and the memory budget. Every change re-resolves and re-validates (:class:`Session`), then redraws
only what changed."""
from __future__ import annotations

import time
from typing import Optional

from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from r9k.registry.errors import RegistryError

from .budget_panel import BudgetPanel
from .detail_pane import DetailPane
from .filter_bar import FilterBar, Filters
from .picker import Picker
from .session import EditError, Session
from .validation_panel import ValidationPanel
from .variant_table import VariantTable

NARROW = 150  # below this width the detail pane replaces the table instead of sitting beside it


class MainScreen(Screen):
    BINDINGS = [
        Binding("slash", "search", "Search", id="r9k.search"),
        Binding("escape", "clear_search", "Clear search", show=False, id="r9k.clear_search"),
        Binding("p", "pick_profile", "Profile", id="r9k.profile"),
        Binding("t", "cycle_tp", "TP", id="r9k.tp"),
        Binding("i", "toggle_detail", "Detail", id="r9k.detail"),
        Binding("v", "problems", "Problems", show=False, id="r9k.problems"),
        Binding("d", "diff", "Diff", id="r9k.diff"),
        Binding("ctrl+s", "save", "Save", id="r9k.save"),
        Binding("S", "save_as", "Save as", show=False, id="r9k.save_as"),
        Binding("l", "launch", "Launch", id="r9k.launch"),
        Binding("r", "reload", "Reload", show=False, id="r9k.reload"),
        Binding("q", "quit", "Quit", id="r9k.quit"),
    ]

    def __init__(self, session: Session, **kw) -> None:
        super().__init__(**kw)
        self.s = session
        self.filters = Filters()
        self.detail_open = True
        self._sized = False
        self.last_toggle_ms: Optional[float] = None  # re-validate + redraw of the last change (bench)
        self.last_toggle_cpu_ms: Optional[float] = None  # the same in CPU time of this process

    # ------------------------------------------------------------------------------ layout

    def compose(self):
        s = self.s
        # the layout classes are set before the children mount: changing them later restyles every node
        self._layout_for(self.app.size.width)
        with Horizontal(id="topbar"):
            yield Static(Text(" r9k ", "bold reverse"), id="logo")
            yield Picker("profile", self._profile_options(), s.profile, id="profile")
            yield Picker("TP", self._tp_options(), s.tp_choice or 0, id="tp")
            yield Static(id="summary")
        yield FilterBar(s.reg, id="filters")
        with Horizontal(id="body"):
            yield VariantTable(id="variants")
            yield DetailPane(id="detail")
        with Horizontal(id="bottom"):
            yield ValidationPanel(id="validation")
            yield BudgetPanel(id="budget")
        yield Footer()

    def _profile_options(self):
        return [(name, name) for name in sorted(self.s.reg.profiles)]

    def _tp_options(self):
        own = self.s.tp if self.s.tp_choice is None else None
        opts = [(f"tp{self.s.tp} (profile)" if self.s.tp_choice is None else "profile's tp", 0)]
        opts += [(f"tp{t}", t) for t in self.s.tp_options() if t != own]
        return opts

    def on_mount(self) -> None:
        # the widgets a toggle redraws, looked up once (query_one matches selectors: ~0.3 ms a call)
        self.table = self.query_one(VariantTable)
        self.validation = self.query_one(ValidationPanel)
        self.budget_panel = self.query_one(BudgetPanel)
        self.summary = self.query_one("#summary", Static)
        self.detail = self.query_one(DetailPane)
        self.refill()
        self.table.focus()
        self.call_after_refresh(self.app.first_frame_painted)

    def on_resize(self, event) -> None:
        self._layout_for(event.size.width)

    def _layout_for(self, width: int) -> None:
        narrow = width < NARROW
        if narrow and (not self._sized or not self.has_class("-narrow")):
            # starting narrow, or shrinking to narrow: the pane closes (it would replace the table)
            self.detail_open = False
        if narrow != self.has_class("-narrow"):
            self.set_class(narrow, "-narrow")
        self._sized = True
        if self.detail_open != self.has_class("-detail-open"):
            self.set_class(self.detail_open, "-detail-open")

    # ------------------------------------------------------------------------------ redraw

    def refill(self) -> None:
        """Rebuild the table (filters, profile or TP changed), then the panels."""
        self.table.fill(self.s, self.filters.apply(self.s))
        self.refresh_panels()

    def refresh_panels(self) -> None:
        s = self.s
        self.validation.show(s)
        self.budget_panel.show(s)
        n = len(s.current_edits)
        t = Text()
        if s.rs.model:
            t.append(f" {s.rs.model}", "bold")
        chain = " < ".join(reversed(s.rs.chain)) + (f" < {s.rs.release}" if s.rs.release else "")
        t.append(f"  {chain}", "dim")
        t.append(f"  {s.rs.hash}", "dim")
        if n:
            t.append(f"  {n} unsaved", "bold magenta")
        self.summary.update(t, layout=False)  # fixed size: no reflow
        self.show_detail()

    def show_detail(self) -> None:
        if self.detail_open:
            self.detail.show(self.s, self.table.current_variant())

    def after_change(self) -> None:
        """After an edit: redraw the changed cells and the panels (the table keeps its rows unless a
        state filter depends on the change)."""
        if self.filters.status and self.filters.status.startswith("@"):
            self.table.fill(self.s, self.filters.apply(self.s))
        else:
            self.table.update_rows(self.s)
        self.refresh_panels()

    # ------------------------------------------------------------------------------ events

    def on_variant_table_highlighted(self, event: VariantTable.Highlighted) -> None:
        self.show_detail()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "search":
            self.filters = self.query_one(FilterBar).filters()
            self.query_one(VariantTable).fill(self.s, self.filters.apply(self.s))
            self.show_detail()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "search":
            self.query_one(VariantTable).focus()

    def on_picker_changed(self, event: Picker.Changed) -> None:
        sel = event.picker
        if sel.id == "profile":
            if event.value != self.s.profile:
                self.switch_profile(str(event.value))
        elif sel.id == "tp":
            tp = int(event.value) or None
            if tp != self.s.tp_choice:
                self.switch_tp(tp)
        elif sel.id and sel.id.startswith("f-"):
            self.filters = self.query_one(FilterBar).filters()
            self.refill()

    # ------------------------------------------------------------------------------ commands

    def switch_profile(self, name: str) -> None:
        self.s.set_profile(name)
        self._sync_pickers()
        self.refill()

    def switch_tp(self, tp: Optional[int]) -> None:
        self.s.set_tp(tp)
        self._sync_pickers()
        self.refill()

    def _sync_pickers(self) -> None:
        self.query_one("#profile", Picker).set_options(self._profile_options(), self.s.profile)
        self.query_one("#tp", Picker).set_options(self._tp_options(), self.s.tp_choice or 0)

    def jump_to(self, vid: str) -> None:
        table = self.query_one(VariantTable)
        if not table.jump_to(vid):
            # hidden by the filters: clear them, then jump
            bar = self.query_one(FilterBar)
            with self.prevent(Input.Changed):
                bar.query_one("#search", Input).value = ""
            for picker in bar.query(Picker):
                picker.value = None
            self.filters = Filters()
            table.fill(self.s, self.filters.apply(self.s))
            table.jump_to(vid)
        table.focus()
        self.show_detail()

    def _apply(self, fn) -> None:
        """Run an edit, then redraw; time the re-validate + redraw (``last_toggle_ms``)."""
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            fn()
        except EditError as exc:
            self.notify(str(exc), severity="error", title="Not a legal value")
            return
        self.after_change()

        def done() -> None:
            self.last_toggle_cpu_ms = (time.process_time() - c0) * 1000.0
            self.last_toggle_ms = (time.perf_counter() - t0) * 1000.0

        self.call_after_refresh(done)

    def action_toggle(self) -> None:
        vid = self.table.current_variant()
        if vid is None:
            return
        if self.s.next_value(vid) is None:
            self.action_edit()
            return
        self._apply(lambda: self.s.cycle(vid))
        self._warn_env(vid)

    def _warn_env(self, vid: str) -> None:
        env = self.s.env_overrides(vid)
        if env:
            self.notify(f"{env} sets this knob: it wins over the profile's value", severity="warning")

    def action_edit(self) -> None:
        vid = self.query_one(VariantTable).current_variant()
        if vid is None:
            return
        from .value_input import ValueInputScreen

        def done(value: Optional[str]) -> None:
            if value is not None:
                self._apply(lambda: self.s.set_value(vid, value))
                self._warn_env(vid)

        self.app.push_screen(ValueInputScreen(self.s.reg.variants[vid], self.s.rs.items[vid].value), done)

    def action_reset(self) -> None:
        vid = self.query_one(VariantTable).current_variant()
        if vid is not None:
            self._apply(lambda: self.s.reset(vid))

    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    def action_clear_search(self) -> None:
        inp = self.query_one("#search", Input)
        if inp.value:
            inp.value = ""
        self.query_one(VariantTable).focus()

    def action_pick_profile(self) -> None:
        self.query_one("#profile", Picker).action_open()

    def action_cycle_tp(self) -> None:
        opts = [None] + [t for t in self.s.tp_options() if t != self.s.profile_tp]
        cur = self.s.tp_choice
        nxt = opts[(opts.index(cur) + 1) % len(opts)] if cur in opts else None
        self.switch_tp(nxt)
        self.notify(f"TP {self.s.tp}" + (" (the profile's)" if nxt is None else ""), timeout=2)

    def action_toggle_detail(self) -> None:
        self.detail_open = not self.detail_open
        self.set_class(self.detail_open, "-detail-open")
        self.show_detail()
        if not (self.detail_open and self.has_class("-narrow")):
            self.query_one(VariantTable).focus()

    def action_problems(self) -> None:
        from .problems_screen import ProblemsScreen

        def done(vid: Optional[str]) -> None:
            if vid:
                self.jump_to(vid)

        self.app.push_screen(ProblemsScreen(self.s), done)

    def open_diff(self, a: Optional[str] = None, b: Optional[str] = None) -> None:
        from .diff_screen import DiffScreen

        self.app.push_screen(DiffScreen(self.s, a, b))

    def action_diff(self) -> None:
        self.open_diff()

    # ------------------------------------------------------------------------------ save / reload

    def action_save(self) -> None:
        from .confirm_screen import ConfirmScreen

        s = self.s
        if not s.has_edits():
            self.notify("nothing to save: no unsaved edits", timeout=3)
            return
        errors = [d for d in s.report.diagnostics if d.level == "error"]
        if errors:
            body = Text(f"'{s.profile}' has {len(errors)} validation error(s):\n")
            for d in errors[:6]:
                body.append(f"✗ {d.message}\n", "red")
            self.app.push_screen(
                ConfirmScreen("Save a profile that does not validate?", body,
                              [("save", "Save anyway", "y", "error"), ("cancel", "Cancel", "n", "default")]),
                lambda ans: self._do_save() if ans == "save" else None)
            return
        self._do_save()

    def _do_save(self) -> None:
        from r9k.registry.profile_io import ProfileConflict

        from .confirm_screen import ConfirmScreen

        s = self.s
        try:
            s.save()
        except ProfileConflict:
            body = Text.assemble((f"{self._shown_path()}", "bold"),
                                 " changed on disk since it was loaded. Saving would overwrite that change.\n"
                                 "Reload it (dropping your edits) or save your edits as a new profile that "
                                 "extends it.")
            self.app.push_screen(
                ConfirmScreen("The file changed on disk", body,
                              [("reload", "Reload", "r", "warning"), ("save_as", "Save as...", "a", "primary"),
                               ("cancel", "Cancel", "n", "default")]),
                self._conflict_answer)
            return
        except RegistryError as exc:  # saved, but the registry no longer loads (another file is broken)
            self.app.show_load_error(exc.diagnostics)
            return
        except OSError as exc:
            self.notify(f"cannot save: {exc}", severity="error", timeout=8)
            return
        self._sync_pickers()
        self.refill()
        self.notify(f"saved {self._shown_path()}", timeout=3)

    def _shown_path(self) -> str:
        return self.s.reg.origins.get(("profile", self.s.profile), (self.s.profile, 0))[0]

    def _conflict_answer(self, ans: str) -> None:
        if ans == "reload":
            self._reload()
        elif ans == "save_as":
            self.action_save_as()

    def action_save_as(self) -> None:
        from .save_as_screen import SaveAsScreen
        from r9k.registry.loader import display_path

        s = self.s

        def done(name: Optional[str]) -> None:
            if not name:
                return
            try:
                path = s.save_as(name)
            except (OSError, ValueError, RegistryError) as exc:
                self.notify(f"cannot save as '{name}': {exc}", severity="error", timeout=8)
                return
            self._sync_pickers()
            self.refill()
            self.notify(f"created {display_path(path)}", timeout=3)

        self.app.push_screen(SaveAsScreen(s.profile, display_path(s.save_as_target()), set(s.reg.profiles)), done)

    def action_reload(self) -> None:
        from .confirm_screen import ConfirmScreen

        if any(self.s.edits.values()):
            self.app.push_screen(
                ConfirmScreen("Reload from disk?", Text("The unsaved edits are dropped."),
                              [("reload", "Reload", "y", "warning"), ("cancel", "Cancel", "n", "default")]),
                lambda ans: self._reload() if ans == "reload" else None)
            return
        self._reload()

    def _reload(self) -> None:
        try:
            self.s.reload()
        except RegistryError as exc:
            self.app.show_load_error(exc.diagnostics)
            return
        self._sync_pickers()
        self.refill()
        self.notify("reloaded from disk", timeout=2)

    # ------------------------------------------------------------------------------ launch / quit

    def action_launch(self) -> None:
        from .launch_screen import LaunchScreen

        plan = self.s.plan_launch(final=False)

        def done(go: bool) -> None:
            if go:
                self.app.exit(result=("launch", self.s))

        self.app.push_screen(LaunchScreen(plan, len(self.s.current_edits)), done)

    def action_quit(self) -> None:
        from .confirm_screen import ConfirmScreen

        if any(self.s.edits.values()):
            n = sum(len(e) for e in self.s.edits.values())
            self.app.push_screen(
                ConfirmScreen("Quit with unsaved edits?", Text(f"{n} unsaved edit(s) will be lost."),
                              [("quit", "Quit", "y", "error"), ("cancel", "Cancel", "n", "default")]),
                lambda ans: self.app.exit() if ans == "quit" else None)
            return
        self.app.exit()
