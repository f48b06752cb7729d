"""The main screen: profile and TP pickers, filters, the variant table, the detail pane, the validation
panel and the memory budget. Every change re-validates (:class:`Session`), then redraws only what changed."""
from __future__ import annotations

import time
from typing import Optional

from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from ...registry.errors import RegistryError
from ...registry.profile_io import ProfileConflict
from .panels import BudgetPanel, DetailPane, FilterBar, Filters, Picker, ValidationPanel
from .session import EditError, Session
from .variant_table import VariantTable

NARROW = 150  # below this width the detail pane replaces the table instead of sitting beside it
TINY = 100  # below this width the budget panel narrows (the validation line keeps room)


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
        Binding("o", "server", "Server", show=False, id="r9k.server"),
        Binding("r", "reload", "Reload", show=False, id="r9k.reload"),
        Binding("e", "open_editor", "$EDITOR", id="r9k.editor"),
        Binding("ctrl+z", "undo_redo(False)", "Undo", show=False, id="r9k.undo"),
        Binding("ctrl+y", "undo_redo(True)", "Redo", show=False, id="r9k.redo"),
        Binding("q", "app.quit", "Quit", id="r9k.quit"),
    ]

    def __init__(self, session: Session, **kw) -> None:
        super().__init__(**kw)
        self.s = session
        self.filters = Filters()
        self.detail_open = True
        self._sized = False
        self._pending_jump: Optional[str] = None  # a jump asked for while the palette covered this screen
        self.last_toggle_ms: Optional[float] = None  # re-validate + redraw of the last change (bench)
        self.last_toggle_cpu_ms: Optional[float] = None  # the same in CPU time of this process

    def compose(self):
        s = self.s
        self._layout_for(self.app.size.width)
        with Horizontal(id="topbar"):
            yield Static(Text(" r9k ", "bold reverse"), id="logo")  # or the unsaved badge
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
        # the widgets a toggle redraws, looked up once (query_one is slow)
        self.table = self.query_one(VariantTable)
        self.validation = self.query_one(ValidationPanel)
        self.budget_panel = self.query_one(BudgetPanel)
        self.summary = self.query_one("#summary", Static)
        self.logo = self.query_one("#logo", Static)
        self.detail = self.query_one(DetailPane)
        self.refill()
        self.table.focus()
        self.call_after_refresh(self.app.first_frame_painted)
        self.call_after_refresh(self._finish_validation)

    def _finish_validation(self) -> None:
        """After the first frame: the checks a deferred start left out, then the panels with them."""
        if not self.s.validated:
            self.s.finish_validation()
            self.refill()
        self.call_after_refresh(self.app.validated_frame_painted)

    def on_resize(self, event) -> None:
        self._layout_for(event.size.width)

    def on_screen_resume(self) -> None:
        if self._pending_jump is not None:
            vid, self._pending_jump = self._pending_jump, None
            self.jump_to(vid)

    def _layout_for(self, width: int) -> None:
        narrow = width < NARROW
        if narrow and (not self._sized or not self.has_class("-narrow")):
            self.detail_open = False
        self.set_class(narrow, "-narrow")
        self.set_class(width < TINY, "-tiny")
        self.set_class(self.detail_open, "-detail-open")
        self._sized = True

    def refill(self) -> None:
        """Rebuild the table (filters, profile or TP changed), then the panels."""
        self.table.fill(self.s, self.filters.apply(self.s))
        self.refresh_panels()

    def refresh_panels(self) -> None:
        s = self.s
        self.validation.show(s)
        self.budget_panel.show(s)
        n = len(s.current_edits)
        others = len(s.other_edits())
        # the unsaved badge replaces the logo: no width cuts it off
        self.logo.update(Text(f" ● {n} unsaved ", "bold reverse magenta") if n else Text(" r9k ", "bold reverse"),
                         layout=False)
        t = Text()
        if others:
            t.append(f" +{others} other profile(s) unsaved ", "magenta")
        if s.rs.model:
            t.append(f" {s.rs.model}", "bold")
        chain = " < ".join(reversed(s.rs.chain)) + (f" < {s.rs.release}" if s.rs.release else "")
        t.append(f"  {chain}", "dim")
        t.append(f"  {s.rs.hash}", "dim")
        self.summary.update(t, layout=False)  # fixed size: no reflow
        self.show_detail()

    def show_detail(self) -> None:
        if self.detail_open:
            self.detail.show(self.s, self.table.current_variant())

    def after_change(self) -> None:
        """After an edit: redraw the changed cells (all rows under a state filter) and the panels."""
        if self.filters.status and self.filters.status.startswith("@"):
            self.table.fill(self.s, self.filters.apply(self.s))
        else:
            self.table.update_rows(self.s)
        self.refresh_panels()

    def on_variant_table_highlighted(self, event: VariantTable.Highlighted) -> None:
        self.show_detail()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "search":
            self.filters = self.query_one(FilterBar).filters()
            self.table.fill(self.s, self.filters.apply(self.s))
            self.show_detail()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "search":
            self.table.focus()

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

    def switch_profile(self, name: str) -> None:
        self.s.set_profile(name)
        self._resync()

    def switch_tp(self, tp: Optional[int]) -> None:
        self.s.set_tp(tp)
        self._resync()

    def _resync(self) -> None:
        """After the profile, its TP size or the registry changed: the pickers' choices, then the table."""
        self.query_one("#profile", Picker).set_options(self._profile_options(), self.s.profile)
        self.query_one("#tp", Picker).set_options(self._tp_options(), self.s.tp_choice or 0)
        self.refill()

    def _reloaded(self, reload) -> bool:
        """Run ``reload()``; a registry that no longer loads shows its error screen (False)."""
        try:
            reload()
        except RegistryError as exc:
            self.app.show_load_error(exc.diagnostics)
            return False
        self._resync()
        return True

    def jump_to(self, vid: str) -> None:
        """Move the cursor to a variant and scroll it into view, first clearing (with a note) a filter that hides it."""
        if self.app.screen is not self:  # under the palette: a background screen does not lay out; jump when shown
            self._pending_jump = vid
            return
        table = self.table
        if not table.jump_to(vid):
            cleared = self.filters.describe()
            with self.prevent(Input.Changed):
                self.query_one(FilterBar).clear()
            self.filters = Filters()
            table.fill(self.s, self.filters.apply(self.s))
            table.jump_to(vid)
            self.notify(f"cleared {cleared} to show {self.s.reg.variants[vid].knob}", timeout=4)
        table.scroll_to_cursor()
        table.call_after_refresh(table.scroll_to_cursor)
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
        if not self.table.cursor_visible():
            self.table.scroll_to_cursor()
            self.notify(f"{self.s.reg.variants[vid].knob} was off screen: press space again to toggle it",
                        timeout=3)
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
        vid = self.table.current_variant()
        if vid is None:
            return
        from .dialogs import ValueInputScreen

        def done(value: Optional[str]) -> None:
            if value is not None:
                self._apply(lambda: self.s.set_value(vid, value))
                self._warn_env(vid)

        self.app.push_screen(ValueInputScreen(self.s.reg.variants[vid], self.s.rs.items[vid].value), done)

    def action_reset(self) -> None:
        vid = self.table.current_variant()
        if vid is not None:
            self._apply(lambda: self.s.reset(vid))

    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    def action_clear_search(self) -> None:
        inp = self.query_one("#search", Input)
        if inp.value:
            inp.value = ""
        self.table.focus()

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
            self.table.focus()

    def action_problems(self) -> None:
        from .dialogs import ProblemsScreen

        def done(vid: Optional[str]) -> None:
            if vid:
                self.jump_to(vid)

        self.app.push_screen(ProblemsScreen(self.s), done)

    def action_diff(self, a: Optional[str] = None, b: Optional[str] = None) -> None:
        from .diff_screen import DiffScreen

        self.app.push_screen(DiffScreen(self.s, a, b))

    def action_save(self, then=None) -> None:
        """Save the current profile, then ``then()``; validation errors and a file changed on disk ask first."""
        s = self.s
        if not s.has_edits():
            if then is None:
                self.notify("nothing to save: no unsaved edits", timeout=3)
            else:
                then()
            return
        errors = [d for d in s.report.diagnostics if d.level == "error"]
        if errors:
            body = Text(f"'{s.profile}' has {len(errors)} validation error(s):\n")
            for d in errors[:6]:
                body.append(f"✗ {d.message}\n", "red")
            self._ask("Save a profile that does not validate?", body,
                      [("save", "Save anyway", "y", "error", lambda: self._do_save(then))])
            return
        self._do_save(then)

    def _ask(self, title: str, body: Text, choices: list[tuple]) -> None:
        """A question: Cancel (n, the default) then ``choices`` (id, label, key, variant, what to do if chosen)."""
        from .dialogs import ConfirmScreen

        act = {c[0]: c[4] for c in choices}
        buttons = [("cancel", "Cancel", "n", "default"), *(c[:4] for c in choices)]
        self.app.push_screen(ConfirmScreen(title, body, buttons, default="cancel"),
                             lambda ans: act[ans]() if ans in act else None)

    def _do_save(self, then=None) -> None:
        s = self.s
        try:
            s.save()
        except ProfileConflict:
            body = Text.assemble((self.s.shown_path, "bold"),
                                 " changed on disk since it was loaded. Saving would overwrite that change.\n"
                                 "Reload it (dropping your edits; ctrl+z brings them back) or save your edits as "
                                 "a new profile that extends it.")
            self._ask("The file changed on disk", body, [("save_as", "Save as...", "a", "primary", self.action_save_as),
                                                         ("reload", "Reload", "r", "warning", self._reload)])
            return
        except RegistryError as exc:  # saved, but the registry no longer loads (another file is broken)
            self.app.show_load_error(exc.diagnostics)
            return
        except OSError as exc:
            self.notify(f"cannot save: {exc}", severity="error", timeout=8)
            return
        self._resync()
        self.notify(f"saved {self.s.shown_path}", timeout=3)
        if then is not None:
            then()

    def action_save_as(self) -> None:
        from .dialogs import SaveAsScreen
        from ...registry.loader import display_path

        s = self.s

        def done(name: Optional[str]) -> None:
            if not name:
                return
            try:
                path = s.save_as(name)
            except (OSError, ValueError, RegistryError) as exc:
                self.notify(f"cannot save as '{name}': {exc}", severity="error", timeout=8)
                return
            self._resync()
            self.notify(f"created {display_path(path)}", timeout=3)

        self.app.push_screen(SaveAsScreen(s.profile, display_path(s.save_as_target()), set(s.reg.profiles)), done)

    def action_reload(self) -> None:
        if any(self.s.edits.values()):
            self._ask("Reload from disk?", Text("The unsaved edits are dropped (ctrl+z brings them back)."),
                      [("reload", "Reload", "y", "warning", self._reload)])
            return
        self._reload()

    def _reload(self) -> None:
        if self._reloaded(self.s.reload):
            self.notify("reloaded from disk", timeout=2)

    def action_undo_redo(self, redo: bool) -> None:
        s = self.s
        profile = s.profile
        label = s.redo() if redo else s.undo()
        if label is None:
            self.notify(f"nothing to {'redo' if redo else 'undo'}", timeout=2)
            return
        if s.profile != profile:
            self._resync()
        else:
            self.refill()
        self.notify(f"{'redone' if redo else 'undone'}: {label}" + (f" (in {s.profile})" if s.profile != profile
                                                                      else ""), timeout=2)

    def action_open_editor(self) -> None:
        """Open the profile's file in $EDITOR, then reload; unsaved edits of it are saved or dropped first (asked)."""
        s = self.s
        path = s.profile_path()
        if path is None:
            self.notify(f"profile '{s.profile}' has no file to edit", severity="error")
            return
        if not s.has_edits():
            self.app.edit_file(path)
            return
        n = len(s.current_edits)
        body = Text.assemble(f"'{s.profile}' has {n} unsaved edit(s) in the panel. Editing ",
                             (self.s.shown_path, "bold"), " now would give two versions of it.\n"
                             "Save them into the file first, or drop them (ctrl+z after the edit brings them "
                             "back on top of the edited file).")
        self._ask("Unsaved edits and an editor", body,
                  [("save", "Save, then edit", "s", "primary",
                    lambda: self.action_save(then=lambda: self.app.edit_file(path))),
                   ("drop", "Drop edits, then edit", "d", "error", lambda: self._drop_then_edit(path))])

    def _drop_then_edit(self, path) -> None:
        self.s.drop_edits("drop edits for $EDITOR")
        self.refill()
        self.app.edit_file(path)

    def after_editor(self, changed: bool) -> None:
        """Back from the editor: reload (other profiles' edits kept) and say what validation says."""
        s = self.s
        if not self._reloaded(lambda: s.reload(keep_others=True)):
            return
        ne, nw = len(s.report.errors), len(s.report.warnings)
        what = "reloaded" if changed else "unchanged"
        self.notify(f"{self.s.shown_path} {what}: {ne} error(s), {nw} warning(s)",
                    severity="error" if ne else "information", timeout=4)

    def action_launch(self) -> None:
        from .launch_screen import LaunchScreen

        def done(answer) -> None:
            if answer:
                self.app.start_server(self.s)

        self.app.push_screen(LaunchScreen(self.s, len(self.s.current_edits)), done)

    def action_server(self) -> None:
        self.app.show_server()

    def request_quit(self) -> None:
        """Every way out but a hang-up: with unsaved edits it asks (Cancel the default; Save and quit saves all)."""
        s = self.s
        edited = {p: e for p, e in s.edits.items() if e}
        if not edited:
            self.app.exit()
            return
        n = sum(len(e) for e in edited.values())
        names = ", ".join(sorted(edited))
        self._ask("Quit with unsaved edits?", Text(f"{n} unsaved edit(s) in {names}. Without saving they are lost."),
                  [("save_quit", "Save and quit", "s", "primary", lambda: self._save_all_then(self.app.exit)),
                   ("discard", "Quit without saving", "d", "error", self.app.exit)])

    def _save_all_then(self, then) -> None:
        """Save each edited profile in turn (each asking as usual), then ``then()``; a failed or cancelled one stops."""
        s = self.s
        pending = sorted(p for p, e in s.edits.items() if e)
        if not pending:
            then()
            return
        name = s.profile if s.profile in pending else pending[0]
        if name != s.profile:
            self.switch_profile(name)
        self.action_save(then=lambda: self._save_all_then(then) if not s.has_edits() else None)
